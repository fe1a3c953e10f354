"""The shipped Mamba-2 SSD layer (``derivations/mamba2_ssd.yaml``, Listing 1 of
Dao and Gu 2024, chunked) and the same layer as its recurrence
(``derivations/mamba2_scan.yaml``): every count by hand, here, per (b, h)
(each count is B H times it), and ``verify`` at small sizes.
"""

from pathlib import Path

import sympy

import symflops
from symflops import cli
from symflops.count.cost import costs

ROOT = Path(__file__).resolve().parent.parent
SSD = ROOT / "derivations" / "mamba2_ssd.yaml"
SCAN = ROOT / "derivations" / "mamba2_scan.yaml"
B, K, Q, H, P, N, T = sympy.symbols("B K Q H P N T", positive=True, integer=True)

#: a chunk's causal pairs s <= l
PAIRS = Q * (Q + 1) / 2


def _zero(e):
    return sympy.expand(e) == 0


def test_ssd_counts_by_hand():
    c = costs(symflops.derive(symflops.load(SSD)))
    assert c.params == 0
    # Matrix products, per (b, h), forward: G = C B over n on the pairs s <= l
    # of each chunk, 2 N K Q(Q+1)/2; Y_diag = M X over s, 2 P K Q(Q+1)/2; the
    # chunk states St = Bd^T X over l, 2 K Q P N; the states entering each chunk,
    # Hin = Dc St over the chunks c < z, 2 P N K(K-1)/2; C Hin over n, 2 K Q N P.
    forward = 2 * N * K * PAIRS + 2 * P * K * PAIRS + 2 * K * Q * P * N \
        + P * N * K * (K - 1) + 2 * K * Q * N * P
    assert _zero(c.flops_forward - B * H * forward)
    # each of those five products has two gradients of its size
    assert _zero(c.flops_backward - 2 * B * H * forward)
    # Elementwise, forward, per (b, h):
    forward_ew = (
        K * (Q - 1)                                  # A_cumsum: a running sum per chunk
        + K * ((Q - 1) + (Q - 1) * (Q - 2) / 2)      # segsum: running sum + differences
        + K * (Q - 1)                                # the decay to the chunk's end (suffix)
        + K * PAIRS                                  # L = exp(segsum) on s <= l
        + K * PAIRS                                  # M = G L on s <= l
        + K * Q                                      # exp of the decay to the end
        + K * Q * N                                  # Bd = B decay
        + K * Q                                      # At: a chunk's log-decays summed, one add each
        + (K - 1) + (K - 1) * (K - 2) / 2            # segsum over the chunks
        + K * (K - 1) / 2                            # exp of it on c < z
        + K * Q                                      # exp(A_cumsum)
        + K * Q * P                                  # Y_off = (C Hin) exp(A_cumsum)
        + K * Q * P)                                 # Y = Y_diag + Y_off
    assert _zero(c.elementwise_forward - B * H * forward_ew)
    # Elementwise, backward, per (b, h), rule by rule:
    backward_ew = (
        K * Q * P                 # dCh = dYo Eo
        + 2 * K * Q * P           # dEo = sum_p Ch dYo, a multiply-add each
        + K * Q                   # dAcs = dEo Eo (exp' is exp, the saved output)
        + K * (K - 1) / 2         # dSc = dDc Dc on c < z
        + 2 * K * (K - 1)         # dAt[w] = sum_{z > w, c < w} dSc: running sums along z, c
        + K * Q * N               # dBm = dBd Dst
        + 2 * K * Q * N           # dDst = sum_n Bm dBd
        + K * Q                   # dSuf = dDst Dst
        + K * PAIRS * 2           # dG = dM L, dL = G dM on s <= l
        + K * PAIRS               # dSeg = dL L on s <= l
        + K * (Q - 1)             # dA from the suffix: a prefix sum
        + 2 * K * Q * (Q - 1)     # dA from segsum: running sums along l and s
        + K * (Q - 1)             # dA from A_cumsum: a suffix sum
        # gradients with several contributions: one add per element and extra one
        + K * Q * N               # dCm (from C Hin and from G)
        + K * Q * N               # dBm (from Bd and from G)
        + K * Q * P               # dX (from St and from Y_diag)
        + 3 * K * Q)              # dA (from At, Suf, Seg, Acs)
    assert _zero(c.elementwise_backward - B * H * backward_ew)


def test_ssd_example_numbers():
    c = costs(symflops.derive(symflops.load(SSD)))
    at = {B: 1, K: 8, Q: 256, H: 24, P: 64, N: 128}
    # per (b, h): K Q(Q+1)(N+P) + 4 K Q P N + P N K(K-1) with Q(Q+1)(N+P) =
    # 256*257*192 = 12,632,064 and 4 Q P N = 4*256*64*128 = 8,388,608:
    # 8*12,632,064 + 8*8,388,608 + 64*128*8*7 = 168,624,128, times H = 24
    assert c.flops_forward.subs(at) == 24 * (8 * 12_632_064 + 8 * 8_388_608 + 64 * 128 * 56)
    assert c.flops_forward.subs(at) == 4_046_979_072


def test_scan_counts_by_hand():
    c = costs(symflops.derive(symflops.load(SCAN)))
    assert c.params == 0
    # Y = sum_n C S: 2 T P N per (b, h), a matrix product (p is S's alone)
    assert _zero(c.flops_forward - 2 * B * H * T * P * N)
    # dC, and dB and dX from dU = G_S: 2 T P N each
    assert _zero(c.flops_backward - 6 * B * H * T * P * N)
    # exp(A) T; U = B X an outer product, T P N; the recurrence T - 1 multiply-adds
    # per (p, n), the first step a copy
    assert _zero(c.elementwise_forward - B * H * (T + T * P * N + 2 * P * N * (T - 1)))
    # dS = C dY an outer product, T P N; the reverse recurrence 2 P N (T - 1); dGa
    # sums G_S S_prev over (p, n) for T - 1 steps, 2 P N (T - 1); dA = dGa Ga, T
    assert _zero(c.elementwise_backward
                 - B * H * (T * P * N + 4 * P * N * (T - 1) + T))


def test_chunked_and_scan_forms_side_by_side():
    ssd = costs(symflops.derive(symflops.load(SSD)))
    scan = costs(symflops.derive(symflops.load(SCAN)))
    at = {B: 1, K: 8, Q: 256, H: 24, P: 64, N: 128}
    # the scan's one matrix product, 2 T P N H at T = 2048
    assert scan.flops_forward.subs({**at, T: 2048}) == 2 * 2048 * 64 * 128 * 24
    # the chunked form does more matrix work (the quadratic blocks) to replace the
    # sequential recurrence: 4,046,979,072 against 805,306,368 FLOPs
    assert ssd.flops_forward.subs(at) > scan.flops_forward.subs({**at, T: 2048})


def test_ssd_passes_verify_at_small_sizes(capsys):
    # distinct sizes (an axis swap fails), K = 3 so that a state crosses a chunk
    status = cli.main(["verify", str(SSD), "--at", "B=1,K=3,Q=4,H=2,P=5,N=6"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "result: pass" in out


def test_scan_passes_verify(capsys):
    status = cli.main(["verify", str(SCAN), "--at", "B=2,T=5,H=1,P=3,N=4"])
    out = capsys.readouterr().out
    assert status == 0, out


def test_ssd_has_no_key_value_cache_and_its_sheet_says_why():
    """Decoding a Mamba-2 layer keeps its state, H P N per sequence whatever the
    context; the chunked form reads Bm and X at an earlier offset s <= l of a chunk
    and St at an earlier chunk c < z, which are not positions of the sequence (it
    has K Q of them).  No cache is counted (the sheet taught 2KH(QP + QN + PN)
    bytes per sequence, a whole sequence of Bm, X and St), and the sheet says so."""
    from symflops.commands.build import render_file
    from symflops.count.summary import summary

    d = symflops.derive(symflops.load(SSD))
    assert summary(d, costs(d), quantities=False).model.inference is None
    sheet = render_file(str(SSD), "md")
    assert "Decoding keeps" not in sheet
    assert ("The key/value cache is not counted: the layer splits a sequence's positions "
            "into $K$ chunks of $Q$") in sheet


def test_a_causal_layer_over_a_subset_of_positions_keeps_its_cache():
    """Mixture-of-Depths attends among the C routed tokens of a sequence (letters
    over C, not S): no tensor splits the S positions into chunks, so K and V are
    its cache, B C N E elements each (mod_block.yaml)."""
    from symflops.count.inference import cached_tensors, uncached

    layer = symflops.load(ROOT / "derivations" / "mod_block.yaml")
    assert uncached(layer) is None
    assert cached_tensors(symflops.derive(layer)) == ("K", "V")

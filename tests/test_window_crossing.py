"""Where attention overtakes 6N for a model with sliding-window layers: the
per-token count has min(S, W) in it (not a polynomial in S), which crashed the
sheet's FLOPs figure (an internal error rendering an imported Gemma 3)."""

from fractions import Fraction

from symflops.count.cost import costs
from symflops.derive.backward import derive
from symflops.hf.importer import import_data
from symflops.planner.model import imported_layer
from symflops.sheets.plots import overtakes

from test_hf_gemma import GEMMA3_1B


def test_gemma3_crossing_is_found_by_hand():
    """google/gemma-3-1b-pt: 26 layers, 4 global and 22 within W = 512 positions;
    N = 4 heads, E = 256, D = 1152, F = 6912, V = 262144 (tied), one key/value head.
    Beyond 6N per token, by hand: the six attention products, 2 N E per pair each,
    over the pairs a query sees on average: (S + 1)/2 globally, (W(W+1)/2 + (S-W) W)/S
    within the window (S >= W). 6N: 6 D (2NE + 2GE + 3F) per layer, plus 6 V D."""
    L_full, L_slide, W, N, G, E, D, F, V = 4, 22, 512, 4, 1, 256, 1152, 6912, 262144

    def beyond(S):
        window = Fraction(W * (W + 1), 2) + (S - W) * W if S >= W else Fraction(S * (S + 1), 2)
        return 12 * N * E * (L_full * Fraction(S + 1, 2) + L_slide * window / S)

    six_n = 6 * (D * (2 * N * E + 2 * G * E + 3 * F) * (L_full + L_slide) + V * D)
    first = next(S for S in range(200_000, 300_000) if beyond(S) >= six_n)
    assert beyond(first - 1) < six_n
    imported = import_data(GEMMA3_1B)
    d = derive(imported_layer(imported))
    crossing = overtakes(d, costs(d), imported.dims, "S")
    assert crossing.length == first == 238_454


def test_a_window_that_never_overtakes_6n():
    """Mistral-7B with a window of 16: beyond 6N a token costs at most the six
    products over 16 pairs, 12 L N E 16 = 25,165,824 FLOPs, far below 6N (4.3e10)."""
    from test_hf_import import MISTRAL_7B

    imported = import_data({**MISTRAL_7B, "sliding_window": 16})
    d = derive(imported_layer(imported))
    crossing = overtakes(d, costs(d), imported.dims, "S")
    assert crossing.length is None and crossing.below

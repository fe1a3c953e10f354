"""Functions defined on x > 0 (log, sqrt, rsqrt, reciprocal), division by a
tensor, and linear attention (issue 17, item 5).

Every expected value is worked out by hand here: the derivatives from
calculus, the FLOP counts from the conventions of :mod:`symflops.ops.functions`
(one per operation of the formula; a square root is one) and of the README
(a product summing over nothing costs 1 per element, a reduction one add per
element read, a matrix product 2 per term), PyTorch's autograd for the
derivatives' values, and ``symflops verify`` on small layers (tests/test_verify.py verifies the shipped declarations).
"""

import math
from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.sizes import POSITIVE, random_leaves
from symflops.checks.verify import verify
from symflops.core.errors import Span, SymflopsError
from symflops.core.ir import Apply
from symflops.core.records import IndexTerm
from symflops.count.cost import costs
from symflops.lang.statement import parse_statement
from symflops.ops import functions as F
from symflops.sheets import printing
import forked

ROOT = Path(__file__).resolve().parent.parent
S, E, H, FF = sympy.symbols("S E H F", positive=True, integer=True)
#: Points inside the domain x > 0.
POINTS = (0.05, 0.3, 1.0, 2.5, 40.0)

#: name -> (f(x), f'(x)) written by hand, as Python functions.
BY_HAND = {
    "log": (math.log, lambda x: 1 / x),
    "sqrt": (math.sqrt, lambda x: 1 / (2 * math.sqrt(x))),
    "rsqrt": (lambda x: x ** -0.5, lambda x: -0.5 * x ** -1.5),
    "reciprocal": (lambda x: 1 / x, lambda x: -1 / x ** 2),
}


# ------------------------------------------------------------ functions --

@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_derivative_by_hand(name):
    f, df = BY_HAND[name]
    fn = F.FUNCTIONS[name]
    assert fn.domain == "positive"
    for x in POINTS:
        assert float(fn.formula.subs(F.X, x)) == pytest.approx(f(x), rel=1e-14)
        assert float(fn.derivative.subs(F.X, x)) == pytest.approx(df(x), rel=1e-14)
    x = np.array(POINTS)
    assert F.numpy_function(Apply(name))(x) == pytest.approx([f(v) for v in POINTS], rel=1e-14)
    assert F.numpy_function(Apply(name, "derivative"))(x) == pytest.approx(
        [df(v) for v in POINTS], rel=1e-14)


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_forward_and_derivative_match_torch_autograd(name):
    torch = pytest.importorskip("torch")
    x = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
    y = F.FUNCTIONS[name].torch(torch, x)
    (grad,) = torch.autograd.grad(y.sum(), [x])
    ours = np.array(POINTS)
    assert F.numpy_function(Apply(name))(ours) == pytest.approx(y.detach().numpy(), rel=1e-14)
    assert F.numpy_function(Apply(name, "derivative"))(ours) == pytest.approx(grad.numpy(),
                                                                            rel=1e-13)


def test_sqrt_and_rsqrt_rules_read_their_output():
    # sqrt' = 1/(2 sqrt x) = 1/(2y); rsqrt' = -x^(-3/2)/2 = -y^3/2: SymPy spots f(x) in f'(x).
    y = F.Y
    assert F.FUNCTIONS["sqrt"].saves == "output"
    assert sympy.simplify(F.FUNCTIONS["sqrt"].derivative_of_output - 1 / (2 * y)) == 0
    assert sympy.simplify(F.FUNCTIONS["rsqrt"].derivative_of_output + y ** 3 / 2) == 0
    assert F.check_output_form("sqrt") < 1e-12 and F.check_output_form("rsqrt") < 1e-12
    # log' = 1/x is not a function of log x that is cheaper: it reads its input.
    assert F.FUNCTIONS["log"].saves == "input"


def test_costs_by_hand():
    # Each is one operation (log; a square root; a reciprocal square root, as
    # RMSNorm counts it; a divide).  Derivatives: 1/x one divide; 1/(2y) a
    # multiply and a divide; -y^3/2 a power, a multiply and a sign; -1/x^2 a
    # power, a divide and a sign.
    got = {n: (F.FUNCTIONS[n].cost, F.FUNCTIONS[n].derivative_cost) for n in BY_HAND}
    assert got == {"log": (1, 1), "sqrt": (1, 2), "rsqrt": (1, 3), "reciprocal": (1, 3)}
    # The existing entries keep their documented counts (gelu's constant sqrt(2) untouched).
    assert (F.FUNCTIONS["gelu"].cost, F.FUNCTIONS["gelu_tanh"].cost) == (8, 14)


def test_a_lone_function_layer_verifies_with_positive_draws():
    layer = symflops.declare("fns", dims={"S": "rows", "F": "columns"},
                             tensors={"Z": {"shape": ["S", "F"], "role": "input"},
                                      "X": {"shape": ["S", "F"], "role": "input"}},
                             ops=["A[s,f] = log(Z[s,f]) X[s,f]", "Q[s,f] = A[s,f] A[s,f]",
                                  "B[s,f] = sqrt(Q[s,f])", "C[s,f] = rsqrt(Z[s,f])"])
    d = symflops.derive(layer)
    leaves = random_leaves(layer, {"S": 3, "F": 4}, np.random.default_rng(1))
    low, high = POSITIVE
    assert ((leaves["Z"] >= low) & (leaves["Z"] <= high)).all()
    assert (leaves["X"] < 0).any()  # drawn normal: only log's argument is positive
    # sqrt's argument Q = A*A is positive by construction (almost surely).
    report = verify(d)
    assert all(c.passed for c in (*report.rules, *report.gradients)), report


# ------------------------------------------------------------- division --

def quotient_layer(ops=("Y[s,f] = N[s,f] / Z[s]",)):
    return symflops.declare("quotient", dims={"S": "rows", "F": "columns"},
                            tensors={"N": {"shape": ["S", "F"], "role": "input"},
                                     "Z": {"shape": ["S"], "role": "input"}}, ops=list(ops))


def test_division_parses_as_a_reciprocal_and_prints_as_a_quotient():
    st = parse_statement("Y[s,f] = N[s,f] / Z[s]")
    (_, call) = st.terms[0].factors
    assert (call.name, call.ref.name, call.column) == ("reciprocal", "Z", 18)
    d = symflops.derive(quotient_layer())
    (op,) = d.layer.ops
    assert op.statement() == "Y[s,f] = N[s,f] / Z[s]"
    assert parse_statement(op.statement()) == st  # it reads back as written
    rules = {r.wrt: r.statement for r in d.rules}
    # dN = dY / Z; dZ = -sum_f dY N / Z^2 (d(1/z)/dz = -1/z^2).
    assert rules == {"N": "dN[s,f] = dY[s,f] / Z[s]",
                     "Z": "dZ[s] = -N[s,f] dY[s,f] / Z[s]**2"}
    assert d.saved == ("N", "Z")


def test_quotient_latex_is_a_fraction():
    d = symflops.derive(quotient_layer())
    poly = printing.PolyPrinter(("S", "F"))
    term = d.layer.ops[0].terms[0]
    assert printing.term(IndexTerm(term.coefficient, term.operands, (), term.summed), poly) \
        == r"\frac{N_{sf}}{Z_{s}}"
    (dz,) = [r for r in d.rules if r.wrt == "Z"]
    t = dz.terms[0]
    assert printing.terms([IndexTerm(t.coefficient, t.operands, (), t.summed)], poly) \
        == r"-\sum_{f} \frac{N_{sf}\, \mathit{dY}_{sf}}{Z_{s}^{2}}"


def test_quotient_flops_by_hand():
    c = costs(symflops.derive(quotient_layer()))
    # Forward: one divide per output element, S F, elementwise (no sum), no matmul.
    assert c.flops_total == 0
    assert c.elementwise_forward == S * FF
    # dN = dY / Z: one divide per element, S F.  dZ = -sum_f N dY / Z^2: the
    # row-wise dot sum_f N dY (2 S F, elementwise: s is on both), times
    # reciprocal'(Z) (S), whose formula -1/z^2 costs 3 per element (3 S).
    assert c.elementwise_backward == sympy.expand(S * FF + 2 * S * FF + S + 3 * S)


def test_division_by_two_tensors_and_a_constant():
    layer = symflops.declare("q2", dims={"S": "rows", "F": "columns"},
                             tensors={"N": {"shape": ["S", "F"], "role": "input"},
                                      "Z": {"shape": ["S"], "role": "input"},
                                      "W": {"shape": ["F"], "role": "input"}},
                             ops=["Y[s,f] = N[s,f] / Z[s] / W[f] / sqrt(F)"])
    d = symflops.derive(layer)
    assert d.layer.ops[0].statement() == "Y[s,f] = N[s,f] / sqrt(F) / Z[s] / W[f]"
    c = costs(d)
    # N / Z (S F), then / W (S F), and the constant 1/sqrt(F) once per element (S F).
    assert c.elementwise_forward == 3 * S * FF
    report = verify(d)
    assert all(c.passed for c in (*report.rules, *report.gradients)), report


def test_division_by_a_product_in_parentheses_is_one_division_per_tensor():
    def factors(text):
        return [(type(f).__name__, getattr(f, "name", getattr(f, "text", None)),
                 getattr(getattr(f, "ref", None), "indices", None))
                for f in parse_statement(text).terms[0].factors]

    expected = [("Ref", "N", None), ("Call", "reciprocal", ("s",)), ("Call", "reciprocal", ("f",)),
                ("Constant", "2", None)]
    assert factors("Y[s,f] = N[s,f] / (Z[s] * W[f]) / 2") == expected
    assert factors("Y[s,f] = N[s,f] / (Z[s] W[f]) / 2") == expected
    assert factors("Y[s,f] = N[s,f] / Z[s] / W[f] / 2") == expected


REFUSED = [
    # (statement, message fragment, column of the offending token, 1-based)
    ("Y[s,f] = N[s,f] / sqrt(Z[s])", "division by the call sqrt(Z[s]) is not supported", 19),
    ("Y[s,f] = N[s,f] / softmax_t(A[s,t])", "division by the call softmax_t(A[s,t])", 19),
    ("Y[s,f] = N[s,f] / (Z[s] + W[s])", "division by parentheses holding a sum of tensors", 19),
    ("Y[s,f] = N[s,f] / (2 Z[s])", "division by parentheses holding a sum of tensors", 19),
    ("Y[s,f] = N[s,f] / Z[s]**2", "powers of tensors are not supported", 23),
    ("Y[s,f] = N[s,f] /", "the op ends after '/'", 18),
]


@pytest.mark.parametrize("text,message,column", REFUSED)
def test_refused_divisions_name_their_position(text, message, column):
    with pytest.raises(SymflopsError) as info:
        parse_statement(text, Span("f.yaml", 4, 5))
    assert message in str(info.value)
    # The statement starts at column 5 of line 4: its 1-based column c is at 5 + c - 1.
    assert f"f.yaml:4:{5 + column - 1}:" in str(info.value)


# ------------------------------------------------------------ domains --

def test_verify_names_the_op_whose_argument_leaves_the_domain():
    layer = symflops.declare("bad_log", dims={"S": "rows", "F": "columns"},
                             tensors={"X": {"shape": ["S", "F"], "role": "input"}},
                             ops=["Z[s] = X[s,f]", "L[s] = log(Z[s])"])
    with pytest.raises(SymflopsError) as info:
        verify(symflops.derive(layer))
    text = str(info.value)
    assert "op 2, 'L[s] = log(Z[s])', evaluates log outside its domain x > 0" in text
    assert "of Z are not positive at the values verify drew" in text
    assert "nan" not in text.lower()


def test_grads_names_the_op_whose_argument_leaves_the_domain(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("dims: {S: rows, F: columns}\n"
                    "tensors:\n  N: {shape: [S, F], role: input}\n  Z: {shape: [S], role: input}\n"
                    "ops:\n  - Y[s,f] = N[s,f] / Z[s]\n")
    np.savez(tmp_path / "in.npz", N=np.ones((2, 3)), Z=np.array([1.0, -2.0]))
    run = forked.run("grads", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"))
    assert run.returncode == 2, run.stderr
    assert f"{path}:6:5: error: op 1, 'Y[s,f] = N[s,f] / Z[s]', evaluates reciprocal outside " \
           "its domain x > 0: 1 of the 2 elements of Z are not positive in the arrays given" \
           in run.stderr
    assert not (tmp_path / "out.npz").exists()


# ----------------------------------------------------- linear attention --

def linear_attention():
    return symflops.derive(symflops.load(ROOT / "derivations" / "attention_linear.yaml"))


def test_linear_attention_counts_by_hand():
    d = linear_attention()
    c = costs(d)
    assert c.params == 0  # Q, K, V are inputs of one head
    # Forward matrix products: KV = phi(K)^T V (2 S H E), Z = phi(Q) Ks, a
    # matrix-vector product (2 S H), phi(Q) KV (2 S H E); the division by Z
    # is elementwise.  Linear in S: no S x S score matrix.
    assert c.flops_forward == 4 * S * H * E + 2 * S * H
    # Backward matrix products: dphi(Q) = dY KV^T / Z, dKV = phi(Q)^T dY / Z,
    # the S H E product inside dZ = -sum phi(Q) KV dY / Z^2, dKs = phi(Q)^T dZ
    # (2 S H), dphi(K) = V dKV^T and dV = phi(K) dKV: 5 x 2 S H E + 2 S H.
    assert c.flops_backward == 10 * S * H * E + 2 * S * H
    assert sympy.degree(c.flops_total, S) == 1
    # Forward elementwise: phi = elu + 1 twice (3 + 1 per element: 8 S H), the
    # sum Ks over t (S H), the divide by Z (S E).
    assert c.elementwise_forward == 9 * S * H + S * E


def test_linear_attention_elementwise_backward_at_the_example():
    c = costs(linear_attention())
    s, h, e = 3072, 32, 32
    # Backward elementwise, by hand: the divide inside dphi(Q) and dKV (one of
    # S E or S H each: the same at H = E), dZ's row-wise dot (2 S H) times
    # reciprocal'(Z) (S) and its formula (3 S), dphi(Q) += dZ Ks (outer, S H),
    # adding the two contributions of dphi(Q) and of dphi(K) (S H each), and
    # dQ, dK = d phi elu'(.) (2 + 1 per element each: 6 S H).
    by_hand = 2 * s * h + (2 * s * h + s + 3 * s) + s * h + 2 * s * h + 6 * s * h
    got = c.elementwise_backward.subs({S: s, H: h, E: e})
    assert got == by_hand
    # And the matrix FLOPs at the paper's sizes: 14 S H E + 4 S H.
    assert c.flops_total.subs({S: s, H: h, E: e}) == 14 * s * h * e + 4 * s * h == 44_433_408


def test_linear_attention_rules_and_saved():
    d = linear_attention()
    rules = [r.statement for r in d.rules]
    assert "dQf[s,h] = dY[s,e] KV[h,e] / Z[s]" in rules
    assert "dZ[s] = -Qf[s,h] KV[h,e] dY[s,e] / Z[s]**2" in rules
    assert "dKV[h,e] = Qf[s,h] dY[s,e] / Z[s]" in rules
    assert "Z" in d.saved and "Qf" in d.saved




# ----------------------------------------------------------------- DoRA --

def test_dora_counts_by_hand():
    d = symflops.derive(symflops.load(ROOT / "derivations" / "dora.yaml"))
    c = costs(d)
    B, I, O, R = sympy.symbols("B I O R", positive=True, integer=True)
    # Parameters: W0 (frozen, O I), A (R I), B (O R), m (O); trainable without W0.
    assert c.params == O * I + R * I + O * R + O
    assert c.trainable == R * I + O * R + O
    # Matrix FLOPs: the adapter product B A (2 O R I) and X Wn^T (2 B I O) forward;
    # backward dX, dWn (2 B I O each), dB, dA (2 O R I each).
    assert c.flops_forward == 2 * O * R * I + 2 * B * I * O
    assert c.flops_backward == 4 * B * I * O + 4 * O * R * I
    # Forward elementwise: adding W0 (O I), squares and their sum over i (2 O I),
    # sqrt (O), m W (O I) then the divide by n (O I): 5 O I + O.
    assert c.elementwise_forward == 5 * O * I + O
    # Backward: dm = sum_i dWn W / n (dot 2 O I, divide O); dW = m dWn / n
    # (m / n first: O, then O I); dn = -sum_i m W dWn / n^2 (dot 2 O I, times m
    # O, times reciprocal' O, its formula 3 O); dQ = dn sqrt'@out(n) (1/(2n):
    # 2, and the multiply: 3 O); dW += dQ square'(W) (2 W: 1, multiply: 2 O I);
    # adding dW's two contributions (O I).
    assert c.elementwise_backward == sympy.expand(
        (2 * O * I + O) + (O + O * I) + (2 * O * I + 5 * O) + 3 * O + 2 * O * I + O * I)
    assert "dn[o] = -m[o] W[o,i] dWn[o,i] / n[o]**2" in [r.statement for r in d.rules]
    assert "dQ[o] = dn[o] sqrt'@out(n[o])" in [r.statement for r in d.rules]




"""Fuzzing: random valid layers derive correctly, and random input never
crashes the command line.

1. Random contractions of 2 to 4 operands over up to 6 letters, with random
   roles and gradient requirements: the derivation succeeds and every rule
   matches central finite differences (float64, every dim 1 to 3).
2. Two-operand contractions shaped like a matmul: backward FLOPs are exactly
   twice the forward FLOPs, as polynomials.
3. Random text, random YAML and structured-but-wrong declarations fed to
   ``symflops.cli.main`` in-process: the exit status is 0 or 2, never a
   traceback or an internal error (70).
"""

from __future__ import annotations

import contextlib
import io
import os
import string
from pathlib import Path

import pytest
import sympy
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import symflops
from gradcheck import gradient_errors
from symflops import cli
LETTERS = "abcdef"
ROLES = [("input", True), ("input", False), ("param", True), ("param", False), ("frozen", False)]
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------- valid contractions --

@st.composite
def contractions(draw, operands=st.integers(2, 4)):
    """(dims, tensors, op): each operand a distinct tensor whose axes are the
    dims of its letters (a repeated letter is a diagonal), an output of
    distinct letters drawn from the operands'."""
    n = draw(operands)
    pool = LETTERS[:draw(st.integers(1, len(LETTERS)))]
    indices = [draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)) for _ in range(n)]
    union = sorted({i for idx in indices for i in idx})
    output = draw(st.permutations(union).flatmap(
        lambda p: st.integers(0, len(p)).map(lambda k: p[:k])))
    tensors = {}
    for k, idx in enumerate(indices):
        role, grad = draw(st.sampled_from(ROLES))
        tensors[f"T{k}"] = {"shape": [i.upper() for i in idx], "role": role,
                            "requires_grad": grad}
    refs = " ".join(f"T{k}[{','.join(idx)}]" for k, idx in enumerate(indices))
    return {i.upper(): "" for i in union}, tensors, f"Y[{','.join(output)}] = {refs}"


@FUZZ
@given(contractions(), st.integers(0, 2**16))
def test_random_contraction_derives_and_matches_finite_differences(case, seed):
    dims, tensors, op = case
    layer = symflops.declare("fuzz", dims=dims, tensors=tensors, ops=[op])
    derivation = symflops.derive(layer)
    symflops.costs(derivation)
    wanted = {n for n, t in tensors.items() if t["requires_grad"] and t["role"] != "frozen"}
    assert {r.wrt for r in derivation.rules} == wanted, op
    errors = gradient_errors(layer, seed=seed, sizes=(1, 3))
    assert set(errors) == wanted
    assert not errors or max(errors.values()) < 1e-6, (op, errors)


@st.composite
def matmul_like(draw):
    """Y = A B with A, B distinct, both needing gradients, no repeated letter
    on one tensor, every letter on at least two of A, B, Y, and each of them
    lacking a letter of the other two (batch, contracted and free letters in
    any mix: a matmul, a batched matmul, a bilinear form, ...)."""
    pool = LETTERS[:draw(st.integers(3, len(LETTERS)))]
    # each letter goes to two or three of (A, B, Y)
    where = {i: draw(st.sampled_from(["AB", "AY", "BY", "ABY"])) for i in pool}
    # A lacks the letters placed on B and Y only, B those on A and Y, Y the contracted ones
    assume({"BY", "AY", "AB"} <= set(where.values()))
    a = [i for i in pool if "A" in where[i]]
    b = [i for i in pool if "B" in where[i]]
    y = [i for i in pool if "Y" in where[i]]
    a, b, y = (draw(st.permutations(t)) for t in (a, b, y))
    roles = draw(st.tuples(st.sampled_from(["input", "param"]), st.sampled_from(["input", "param"])))
    tensors = {"A": {"shape": [i.upper() for i in a], "role": roles[0]},
               "B": {"shape": [i.upper() for i in b], "role": roles[1]}}
    op = f"Y[{','.join(y)}] = A[{','.join(a)}] B[{','.join(b)}]"
    return {i.upper(): "" for i in pool}, tensors, op


@FUZZ
@given(matmul_like())
def test_matmul_like_backward_is_twice_forward(case):
    dims, tensors, op = case
    layer = symflops.declare("mm", dims=dims, tensors=tensors, ops=[op])
    c = symflops.costs(symflops.derive(layer))
    assert sympy.expand(c.flops_backward - 2 * c.flops_forward) == 0, (op, c.flops_forward,
                                                                      c.flops_backward)
    assert sympy.expand(c.flops_total - 3 * c.flops_forward) == 0


def test_a_letter_summed_on_one_operand_only_breaks_the_ratio():
    """Why the property above asks every letter to be on two of A, B, Y: here
    ``z`` is summed on A alone; the forward product spans it, but the rule
    dA = dY B only broadcasts over it, so backward is not twice forward."""
    layer = symflops.declare("z", dims={"I": "", "J": "", "K": "", "Z": ""},
                             tensors={"A": {"shape": ["I", "K", "Z"], "role": "input"},
                                      "B": {"shape": ["K", "J"], "role": "param"}},
                             ops=["Y[i,j] = A[i,k,z] B[k,j]"])
    c = symflops.costs(symflops.derive(layer))
    I, J, K, Z = (sympy.Symbol(n, positive=True, integer=True) for n in "IJKZ")
    assert c.flops_forward == 2 * I * J * K * Z
    assert c.flops_backward == sympy.expand(2 * I * J * K + 2 * I * J * K * Z)


# ---------------------------------------------------- the command line -------

def run_cli(tmp_dir, text: str | bytes, *args: str) -> tuple[int, str, str]:
    path = os.path.join(tmp_dir, "fuzz.yaml")
    with open(path, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main([args[0], path, *args[1:]] if args else ["derive", path])
        except SystemExit as exc:  # argparse's usage errors (a claim starting with '-')
            status = exc.code
    return status, out.getvalue(), err.getvalue()


def assert_clean(status: int, err: str) -> None:
    assert status in (0, 2), err
    assert "Traceback" not in err and "internal error" not in err, err
    if status == 2:  # one line from symflops, or argparse's usage and error lines
        assert err.startswith("symflops: ") and "error: " in err.splitlines()[0] \
            or err.startswith("usage: ") and "error: " in err, err


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_random_text_is_a_clear_error(fuzz_dir, text):
    assert_clean(*run_cli(fuzz_dir, text)[::2])


NAMES = st.one_of(st.sampled_from(["B", "D", "F", "X", "W", "Y", "H", "tok", "dX", "d", "for",
                                   "2B", "", "B D", "softmax_t", "mask_Y", "P_L"]),
                  st.text(alphabet=string.ascii_letters + "_0123456789", min_size=1, max_size=6))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=12), NAMES)
ANY = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=4)), max_leaves=12)


def mostly(good, bad):
    """``good`` about three times in four."""
    return st.one_of(good, good, good, bad)


DIMS = ["B", "D", "F", "S", "V", "P", "K"]
TENSORS = ["X", "W", "H", "E", "tok", "g", "Z", "y", "Q"]
AXES = mostly(st.sampled_from(DIMS), st.one_of(st.sampled_from(
    ["B + 1", "P + K - 1", "2*D", "D/2", "0", "-1", "sqrt(D)", "Q", "B**99999", "max(B, D)",
     "(B", "1e400", "__import__('os')", "B[0]", "B - B", "D - F"]), SCALARS))
TENSOR = st.fixed_dictionaries(
    {"shape": mostly(st.lists(AXES, max_size=3), SCALARS)},
    optional={"role": mostly(st.sampled_from(["input", "param", "frozen", "index"]),
                             st.one_of(st.sampled_from(["weight", "activation", "mask"]), SCALARS)),
              "requires_grad": mostly(st.booleans(), SCALARS),
              "description": SCALARS})
TENSOR = mostly(TENSOR, st.builds(lambda t, v: {**t, "shap": v}, TENSOR, ANY))
LETTER = st.sampled_from("bdfstvpk")
FUNCTION = st.sampled_from(["gelu", "relu", "silu", "exp", "tanh", "sigmoid", "gelu_tanh",
                            "softmax_t", "softmax_d", "layernorm_d", "rmsnorm_f", "dropout",
                            "cross_entropy_v", "cross_entropy_mean_d", "sqrt", "frob"])
CONSTANT = st.sampled_from(["2", "0.5", "sqrt(D)", "D", "(1 + 1)", "0.1", "1e999", "(B", "x"])


@st.composite
def index(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return f"{draw(st.sampled_from(['tok', 'y', 'X']))}[{draw(LETTER)}]"
    if kind == 1:
        return f"{draw(LETTER)}+{draw(LETTER)}"
    return draw(LETTER)


RANK = {"X": 2, "W": 2, "H": 2, "E": 2, "tok": 1, "g": 1, "Z": 2, "y": 1, "Q": 2, "Y": 2,
        "L": 0, "A": 2}


@st.composite
def ref(draw, names=st.sampled_from(TENSORS)):
    """A tensor reference, usually with as many indices as the tensor has axes."""
    name = draw(names)
    sizes = st.just(RANK.get(name, 2))
    n = draw(mostly(sizes, st.integers(0, 3)))
    return f"{name}[{','.join(draw(index()) for _ in range(n))}]"


@st.composite
def factor(draw):
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return f"{draw(FUNCTION)}({draw(ref())})"
    if kind == 1:
        second = draw(st.one_of(CONSTANT, ref()))
        return f"{draw(FUNCTION)}({draw(ref())}, {second})"
    if kind == 2:
        return draw(CONSTANT) if draw(st.booleans()) else "/ " + draw(CONSTANT)
    return draw(ref())


@st.composite
def statement(draw):
    """An op built from the grammar's pieces with random choices: often
    valid, often subtly wrong (letters, shapes, roles, arguments)."""
    terms = draw(st.lists(st.lists(factor(), min_size=1, max_size=3).map(" ".join),
                          min_size=1, max_size=3))
    text = f"{draw(ref(st.sampled_from(['Y', 'H', 'L', 'A', 'X'])))} = " + \
        draw(st.sampled_from([" + ", " - "])).join(terms)
    if draw(st.integers(0, 4)) == 0:
        conditions = draw(st.lists(st.builds("{} {} {}".format, LETTER, st.sampled_from(
            ["<=", "<", ">=", ">", "="]), LETTER), min_size=1, max_size=2))
        text += " where " + ", ".join(conditions)
    return text


TOKENS = ["X", "W", "Y", "[", "]", ",", "=", "*", "/", "+", "-", "(", ")", "b", "d", "p+k", "2",
          "**", "^", "where", "<=", " ", "#", ":", "'", '"', "\\", "{", "}", "X[b,d]", "Y[]"]
OP = st.one_of(statement(), statement(), st.lists(st.sampled_from(TOKENS), max_size=14).map("".join))


NINE_IN_TEN = st.sampled_from([True] * 9 + [False])  # (st.integers would favour 0)


@st.composite
def declaration(draw):
    """A declaration-shaped mapping: dims, tensors and ops mostly present and
    mostly well formed, each part sometimes wrong."""
    out = {}
    if draw(NINE_IN_TEN):
        out["dims"] = draw(mostly(st.dictionaries(mostly(st.sampled_from(DIMS), NAMES),
                                                  st.text(max_size=8), min_size=1, max_size=5),
                                  ANY))
    if draw(NINE_IN_TEN):
        out["tensors"] = draw(mostly(st.dictionaries(mostly(st.sampled_from(TENSORS), NAMES),
                                                     mostly(TENSOR, ANY), min_size=1,
                                                     max_size=4), ANY))
    if draw(NINE_IN_TEN):
        out["ops"] = draw(mostly(st.lists(mostly(OP, SCALARS), min_size=1, max_size=3), ANY))
    for key in ("name", "title", "precision", "extra"):
        if not draw(NINE_IN_TEN):
            out[key] = draw(mostly(st.sampled_from(["ffn", "bf16-adam", "fp32-adam"]), ANY))
    return out


@st.composite
def wrong_yaml(draw):
    """A declaration-shaped mapping, dumped to YAML, one time in ten with one
    character deleted, inserted or replaced."""
    text = yaml.safe_dump(draw(declaration()), allow_unicode=True, sort_keys=False)
    if text and not draw(NINE_IN_TEN):
        k = draw(st.integers(0, len(text) - 1))
        edit = draw(st.sampled_from(["delete", "insert", "replace"]))
        c = draw(st.sampled_from(list(":[]{},-'\"#\n\t &*!|>%@`")))
        text = (text[:k] + (c if edit != "delete" else "")
                + text[k + (edit != "insert"):])
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wrong_yaml())
def test_wrong_yaml_is_a_clear_error(fuzz_dir, text):
    assert_clean(*run_cli(fuzz_dir, text)[::2])


SHIPPED = sorted((Path(__file__).resolve().parent.parent / "derivations").glob("*.yaml"))
SMALL = [p for p in SHIPPED if p.stem in ("ffn", "embedding", "lm_loss", "conv1d", "dropout",
                                          "attention_scores_causal", "swiglu")]


def _paths(value, prefix=()):
    """Every place in a nested structure, as a tuple of keys and positions."""
    yield prefix
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, prefix + (key,))


@st.composite
def mutated_shipped(draw):
    """A shipped declaration with one to three places replaced by a random
    value, deleted, or (for an op) replaced by a random statement."""
    data = yaml.safe_load(draw(st.sampled_from(SMALL)).read_text())
    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in _paths(data) if p]
        place = draw(st.sampled_from(places))
        parent = data
        for key in place[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["value", "value", "delete", "op", "key"]))
        if action == "delete":
            del parent[place[-1]]
        elif action == "op" and place[0] == "ops" and len(place) == 2:
            parent[place[-1]] = draw(statement())
        elif action == "key" and isinstance(parent, dict):
            parent[draw(NAMES)] = parent.pop(place[-1])
        else:
            parent[place[-1]] = draw(st.one_of(SCALARS, AXES, ANY))
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_shipped())
def test_mutated_shipped_declaration_is_a_clear_error(fuzz_dir, text):
    assert_clean(*run_cli(fuzz_dir, text)[::2])


def test_a_class_letter_of_extent_one_derives_and_verifies(tmp_path):
    """Found by the test above: lm_loss with its vocabulary axis declared as a
    literal 1.  The softmax's guard says ``v' == 0``, which always holds when
    ``v`` runs over 0 .. 0.  With one class the softmax is 1 and the loss is
    0 whatever Z is: dZ = softmax - onehot = 0; finite differences of the
    numeric forward are the oracle (verify)."""
    text = next(p for p in SHIPPED if p.stem == "lm_loss").read_text()
    one = text.replace("shape: [D, V]", "shape: [D, 1]")
    assert one != text
    status, out, err = run_cli(str(tmp_path), one, "verify")
    assert status == 0 and "result: pass" in out, out + err


VALID = """\
dims: {B: batch, D: width, F: hidden}
tensors:
  X: {shape: [B, D], role: input}
  W: {shape: [D, F], role: param}
ops:
  - %s
"""


RICH = """\
dims: {B: batch, D: width, F: hidden, V: vocabulary, S: sequence, P: positions, K: kernel}
tensors:
  X: {shape: [B, D], role: input}
  W: {shape: [D, F], role: param}
  E: {shape: [V, D], role: param}
  tok: {shape: [B], role: index}
  y: {shape: [B], role: index}
  Z: {shape: [B, V], role: input, requires_grad: false}
  g: {shape: [D], role: frozen}
  Q: {shape: [S, P + K - 1], role: input}
ops:
%s
"""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OP, min_size=1, max_size=3))
def test_garbage_ops_in_a_valid_declaration_are_a_clear_error(fuzz_dir, ops):
    text = RICH % "\n".join("  - " + yaml.safe_dump(op, default_style='"').strip() for op in ops)
    assert_clean(*run_cli(fuzz_dir, text)[::2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["B=1", "D=2", "F=3", "B=0", "D=-1", "F=1e3", "Q=2",
                                           "B", "=", "B=2**99", "F=1/2", "D=4,5", "F=1:9:2",
                                           "F=9:1:1", "B=1:2", "D=,", "B=sqrt(2)"]),
                          st.text(max_size=10)), max_size=5),
       st.sampled_from(["eval", "sweep"]))
def test_random_values_for_eval_and_sweep_are_a_clear_error(fuzz_dir, values, command):
    ffn = VALID % "Y[b,e] = X[b,d] W[d,f] W[e,f]"
    extra = ["--csv", os.path.join(fuzz_dir, "out.csv")] if command == "sweep" else []
    assert_clean(*run_cli(fuzz_dir, ffn, command, *values, *extra)[::2])


CLAIM_TOKENS = ["flops.total", "flops.forward", "params", "B", "D", "F", "memory.total_bytes",
                "==", "<=", "<", "!=", "*", "+", "-", "/", "**", "(", ")", "2", "6", "0",
                "sqrt(B)", "max(B,D)", "log(0)", "1e999", "x", ",", "'", "[", "flops"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.lists(st.sampled_from(CLAIM_TOKENS), max_size=8).map(" ".join),
                          st.text(max_size=20)), min_size=1, max_size=3))
def test_random_claims_are_decided_or_a_clear_error(fuzz_dir, claims):
    ffn = VALID % "Y[b,e] = X[b,d] W[d,f] W[e,f]"
    status, _, err = run_cli(fuzz_dir, ffn, "check", *claims)
    assert status in (0, 1, 2), err
    assert "Traceback" not in err and "internal error" not in err, err

"""Property-based tests: any einsum a user can write derives correctly.

Hypothesis draws random contractions (1 to 3 operands, letters from a small
pool so that batch, contracted, broadcast, outer and diagonal patterns all
occur, a tensor sometimes used twice) and random roles; every derived rule
must match central finite differences of the forward pass, which is computed
independently of the derivation.
"""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symflops
from gradcheck import gradient_errors

LETTERS = "ijkl"


@st.composite
def contractions(draw):
    n = draw(st.integers(1, 3))
    operands = [draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3)) for _ in range(n)]
    union = sorted({i for op in operands for i in op})
    output = draw(st.lists(st.sampled_from(union), unique=True, max_size=min(3, len(union))))
    reuse = n >= 2 and draw(st.booleans())  # the last operand reads the first tensor again
    dims = {i.upper(): "" for i in union}
    tensors, refs = {}, []
    for k, idx in enumerate(operands):
        if reuse and k == n - 1 and len(idx) == len(operands[0]):
            name, shape = "T0", [i.upper() for i in operands[0]]
            # the same tensor must see the same dims on each axis
            if [i.upper() for i in idx] != shape:
                name = f"T{k}"
        else:
            name = f"T{k}"
        if name not in tensors:
            role = draw(st.sampled_from(["input", "param"]))
            tensors[name] = {"shape": [i.upper() for i in idx], "role": role}
        refs.append(f"{name}[{','.join(idx)}]")
    op = f"Y[{','.join(output)}] = " + " ".join(refs)
    return dims, tensors, op


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions(), st.integers(0, 2**16))
def test_random_contractions_match_finite_differences(case, seed):
    dims, tensors, op = case
    layer = symflops.declare("random", dims=dims, tensors=tensors, ops=[op])
    errors = gradient_errors(layer, seed=seed)
    assert errors, op
    assert max(errors.values()) < 1e-6, (op, errors)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=string.printable, max_size=60))
def test_random_op_text_never_raises_anything_but_a_clear_error(text):
    """Whatever a user types as an op, the answer is a derivation or a
    SymflopsError (never another exception, never executed text)."""
    try:
        layer = symflops.declare("fuzz", dims={"B": "", "D": ""},
                                 tensors={"X": {"shape": ["B", "D"], "role": "input"},
                                          "W": {"shape": ["D", "D"], "role": "param"}},
                                 ops=[text])
    except symflops.SymflopsError:
        return
    symflops.costs(symflops.derive(layer))  # what parses also derives

"""Blocks declared inline under ``blocks:`` count exactly as the same blocks
in files (the expected figures are the shipped file-based declarations')."""

import re
import shutil

import pytest

from symflops.core.errors import SymflopsError
from symflops.declaration.reader import load, loads
from symflops.count.cost import costs
from symflops.count.summary import summary
from symflops.derive.backward import derive


def _inline(model: str, block: str, name: str) -> str:
    """``model`` with ``include: NAME.yaml`` replaced by the block written inline."""
    body = re.sub(r"(?m)^#.*\n", "", block.split("\nexamples:")[0])
    indented = "\n".join("    " + line if line else line for line in body.splitlines())
    text = model.replace(f"include: {name}.yaml", f"include: {name}")
    return text.replace("examples:", f"blocks:\n  {name}:\n{indented}\nexamples:", 1)


def _counts(layer):
    d = derive(layer)
    s = summary(d, costs(d))
    return s.model.parameters.total, s.model.per_token.flops.total, s.memory.activations


def test_an_inline_block_counts_as_its_file(tmp_path):
    model = open("derivations/llama.yaml").read()
    block = open("derivations/llama_block.yaml").read()
    path = tmp_path / "llama_inline.yaml"
    path.write_text(_inline(model, block, "llama_block"))
    inline, files = load(path), load("derivations/llama.yaml")
    assert [op.statement() for op in inline.ops] == [op.statement() for op in files.ops]
    assert [b.repeat for b in inline.blocks] == [b.repeat for b in files.blocks]
    assert _counts(inline) == _counts(files)


CYCLE = """
dims: {B: b, D: d}
tensors: {X: {shape: [B, D], role: input}}
blocks:
  one:
    dims: {B: b, D: d}
    tensors: {X: {shape: [B, D], role: input}}
    ops:
      - include: two
  two:
    dims: {B: b, D: d}
    tensors: {X: {shape: [B, D], role: input}}
    ops:
      - include: one
ops:
  - include: one
"""


def test_blocks_that_include_each_other_are_refused_at_the_include():
    with pytest.raises(SymflopsError, match=r"the blocks include each other: one -> two -> one"):
        loads(CYCLE, "cycle.yaml")


def test_a_block_declaring_blocks_is_refused():
    text = CYCLE.replace("    ops:\n      - include: two", "    blocks: {}\n    ops:\n      - include: two")
    with pytest.raises(SymflopsError, match="declares blocks of its own"):
        loads(text, "nested.yaml")


def test_blocks_must_be_a_mapping_of_names():
    with pytest.raises(SymflopsError, match="'blocks' must be a mapping"):
        loads("dims: {B: b}\ntensors: {}\nops: []\nblocks: [a]\n", "bad.yaml")
    with pytest.raises(SymflopsError, match="not a valid name"):
        loads("dims: {B: b}\ntensors: {}\nops: []\nblocks: {'a b': {}}\n", "bad.yaml")


TWO = """
dims: {B: b, D: d}
tensors:
  X0: {shape: [B, D], role: input}
blocks:
  norm:
    dims: {B: b, D: d}
    tensors:
      X: {shape: [B, D], role: input}
      g: {shape: [D], role: param}
    ops:
      - Y[b,d] = rmsnorm_d(X[b,d]) * g[d]
ops:
  - include: norm
    tensors: {X: X0, Y: X1}
  - include: norm
    tensors: {X: X1, Y: X2, g: g_2}
"""


def test_a_block_included_twice_renames_its_normalised_tensor_with_its_output():
    """Y = rmsnorm(X) * g is lowered through Y_hat (and rstd_Y_hat): renaming Y
    renames them too, so the second copy reads back (before: a clash on Y_hat)."""
    layer = loads(TWO, "two.yaml")
    names = [t.name for t in layer.tensors]
    assert {"X1_hat", "X2_hat", "rstd_X1_hat", "rstd_X2_hat", "g", "g_2"} <= set(names)

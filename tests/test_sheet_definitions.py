"""A sheet writes each kind of op's definition once and points the others to
it ("Op 14 is defined as op 8 is"): that is true only of ops of one form. The
moe sheet said the router's softmax over the experts (no mask) was defined as
the causal softmax over the keys is, whose sum stops at the query's position."""

import re

from symflops.commands.build import render_file


def test_an_unmasked_softmax_is_not_defined_as_a_masked_one():
    sheet = render_file("derivations/moe.yaml", "md")
    ops = dict(re.findall(r"^\| (\d+)(?: \(\$\\times L\$\))? \| \$([^$]*)\$", sheet, re.M))
    masked = next(n for n, text in ops.items() if "softmax" in text and "t \\le s" in text)
    router = next(n for n, text in ops.items() if "softmax}_{x}" in text)
    assert f"Op {router} is defined as op {masked} is" not in sheet
    assert f"Op {router} is defined by" in sheet
    # ops of one form still share one definition (the RMSNorms)
    assert re.search(r"Op \d+ is defined as op \d+ is, with its own names", sheet)

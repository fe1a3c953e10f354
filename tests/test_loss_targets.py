"""A cross-entropy's targets are checked against the logits' rows: a letter
that ranges over two sizes is an error at its column, never a crash (found by
the fuzz test: `X: [1, D]` made `b` range over 1 in the logits and B in y)."""

from __future__ import annotations

import forked


def test_targets_whose_rows_differ_from_the_logits_are_refused(tmp_path):
    path = tmp_path / "loss.yaml"
    path.write_text("""name: loss
dims: {B: tokens, D: width, V: vocab}
tensors:
  X: {shape: [1, D], role: input}
  W_u: {shape: [D, V], role: param}
  y: {shape: [B], role: index}
ops:
- Z[b,v] = X[b,d] W_u[d,v]
- L[] = cross_entropy_v(Z[b,v], y[b])
""")
    run = forked.run("derive", str(path))
    assert run.returncode == 2, run.stderr
    assert "loss.yaml:9:35: error: index 'b' ranges over 1 in Z but over B in y" in run.stderr
    assert "Traceback" not in run.stderr

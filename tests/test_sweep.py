"""``symflops sweep``: a grid of configurations to CSV, checked against
``symflops eval`` and against the feed-forward block's formulas by hand."""

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
import sympy

from symflops import cli
from symflops.count.cost import costs
from symflops.derive.backward import derive
from symflops.count.evaluate import evaluate
from symflops.declaration.reader import load
from symflops.count.records import lookup
from symflops.count.summary import summary
from symflops.commands.sweep import Axis, BLOCK, blocks, parse_axes, parse_values, sweep
import forked

ROOT = Path(__file__).resolve().parent.parent
FFN = ROOT / "derivations" / "ffn.yaml"


def run_cli(*args):
    return forked.run(*map(str, args), cwd=ROOT)


def read_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], [[int(x) for x in r] for r in rows[1:]]


def test_ffn_sweep_matches_eval_and_the_hand_formulas(tmp_path):
    out = tmp_path / "ffn.csv"
    result = run_cli("sweep", FFN, "B=4,1048576", "D=1024:4096:1024", "F=16384,11008",
                     "--csv", out)
    assert result.returncode == 0, result.stderr
    assert "16 configurations" in result.stdout and "configurations/s" in result.stdout
    header, rows = read_csv(out)
    assert header == ["B", "D", "F", "flops.forward", "flops.backward", "flops.total",
                      "flops_elementwise.total", "params", "memory.activation_bytes",
                      "memory.total_bytes"]
    assert len(rows) == 2 * 4 * 2
    # Row-major in the declared order of the dims: B slowest, F fastest.
    assert [r[:3] for r in rows[:3]] == [[4, 1024, 16384], [4, 1024, 11008], [4, 2048, 16384]]
    for B, D, F, fwd, bwd, total, elementwise, params, act_bytes, total_bytes in rows:
        assert (fwd, bwd, total) == (4 * B * D * F, 8 * B * D * F, 12 * B * D * F)
        assert elementwise == 0 and params == 2 * D * F
        # bf16-adam: saved X and H at 2 bytes; 2 + 2 + 2*4 bytes per trained parameter
        assert act_bytes == 2 * B * (D + F)
        assert total_bytes == 12 * params + act_bytes
    for row in (rows[0], rows[-1]):
        B, D, F = row[:3]
        numbers = json.loads(run_cli("eval", FFN, f"B={B}", f"D={D}", f"F={F}", "--json").stdout)
        expected = [numbers["flops"]["forward"], numbers["flops"]["backward"],
                    numbers["flops"]["total"], numbers["flops_elementwise"]["total"],
                    numbers["params"], numbers["memory"]["activation_bytes"],
                    numbers["memory"]["total_bytes"]]
        assert row[3:] == expected


@pytest.mark.parametrize("name", ["transformer_block", "conv1d", "attention_causal", "norms"])
def test_sweep_matches_exact_evaluation_on_shipped_layers(tmp_path, name):
    """The numbers ``symflops eval`` prints (evaluate(summary)) at several rows."""
    layer = load(ROOT / "derivations" / f"{name}.yaml")
    derivation = derive(layer)
    s = summary(derivation, costs(derivation))
    dims = [d.name for d in layer.dims]
    out = tmp_path / "out.csv"
    result = sweep(layer, s, [f"{n}=1:7:3" for n in dims], str(out))
    header, rows = read_csv(out)
    assert result.configurations == len(rows) == 3 ** len(dims)
    for row in (rows[0], rows[len(rows) // 2], rows[-1]):
        numbers = evaluate(s, {n: sympy.Integer(v) for n, v in zip(dims, row)})
        for column, value in zip(header[len(dims):], row[len(dims):]):
            assert value == lookup(numbers, column), column


def test_macs_and_precision(tmp_path, capsys):
    out = tmp_path / "macs.csv"
    assert cli.main(["sweep", str(FFN), "B=2", "D=3", "F=5", "--macs", "--precision",
                     "fp32-adam", "--csv", str(out)]) == 0
    header, rows = read_csv(out)
    assert header[3:6] == ["macs.forward", "macs.backward", "macs.total"]
    B, D, F = 2, 3, 5
    assert rows[0][3:6] == [2 * B * D * F, 4 * B * D * F, 6 * B * D * F]
    assert rows[0][8] == 4 * B * (D + F)  # fp32 activations


def test_csv_to_standard_output(capsys):
    assert cli.main(["sweep", str(FFN), "B=2", "D=3", "F=5,6", "--csv", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1:] == ["2,3,5,120,240,360,0,30,32,392",
                                             "2,3,6,144,288,432,0,36,36,468"]
    assert "2 configurations" in captured.err


def test_values():
    assert parse_values("D", "1024:4096:1024").tolist() == [1024, 2048, 3072, 4096]
    assert parse_values("D", "1:10:4").tolist() == [1, 5, 9]  # the stop when a step lands on it
    assert parse_values("N", "8,16,64:128:32").tolist() == [8, 16, 64, 96, 128]
    assert parse_values("B", "2**20").tolist() == [2**20]
    assert parse_values("B", "5:5:1").tolist() == [5]


def test_blocks_cover_the_grid_in_row_major_order():
    axes = [np.arange(1, 4.0), np.arange(1, 6.0), np.arange(1, 8.0)]
    for size in (1, 4, 7, 10, 35, 200):
        rows = []
        for block in blocks(axes, size):
            assert np.prod([len(a) for a in block]) <= size
            rows += [tuple(p) for p in np.stack(np.meshgrid(*block, indexing="ij"), -1)
                     .reshape(-1, 3).tolist()]
        assert rows == [(a, b, c) for a in axes[0] for b in axes[1] for c in axes[2]]


def test_large_values_are_float64_and_written_exactly(capsys):
    # 12 B D F at B = D = F = 2**20 is 1.4e19, beyond int64: a float64, written as one
    assert cli.main(["sweep", str(FFN), "B=2**20", "D=2**20", "F=2**20", "--csv", "-"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split(",")
    assert row[:3] == ["1048576"] * 3 and row[7] == str(2 * 2**40)  # params, exact
    assert row[5] == "1.3835058055282164e+19" and float(row[5]) == 12 * 2**60


def test_grid_limit_is_checked_before_building_values():
    layer = load(FFN)
    with pytest.raises(cli.SymflopsError, match="more than the limit"):
        parse_axes(["B=1:1000000000000:1", "D=1", "F=1"], layer)
    axes = parse_axes(["B=1:10:1", "D=4", "F=8,9"], layer)
    assert [a.name for a in axes] == ["B", "D", "F"] and isinstance(axes[0], Axis)
    assert BLOCK > 1000


@pytest.mark.parametrize("values,fragment", [
    (["B=10", "D=4"], "no value for dimension(s) F"),
    (["B=10", "D=4", "F=3", "Q=2"], "has no dimension 'Q'"),
    (["B=10", "D=4", "F=1024:8192"], "bad range '1024:8192' for dimension F"),
    (["B=10", "D=4", "F=8192:1024:1024"], "is below the start"),
    (["B=10", "D=4", "F=1:8:0"], "must be a positive integer"),
    (["B=10", "D=4", "F=0.5"], "must be a positive integer"),
    (["B=10", "D=4", "F=8,,16"], "empty value"),
    (["B=10", "D=4", "F"], "expected NAME=VALUES"),
    (["B=10", "D=4", "F=3", "F=4"], "given twice"),
    (["B=10", "D=4", "F=2**60"], "larger than 2**53"),
    (["B=1:100000", "D=1:100000:1", "F=1:100000:1"], "bad range"),
    (["B=1:100000:1", "D=1:100000:1", "F=1:100:1"], "more than the limit of 100,000,000"),
    (["B=10", "D=4", "F=__import__('os')"], "error"),
])
def test_bad_values_exit_2_without_traceback(tmp_path, capsys, values, fragment):
    out = tmp_path / "out.csv"
    assert cli.main(["sweep", str(FFN), *values, "--csv", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("symflops: error: ") and fragment in captured.err
    assert "fix: " in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert os.listdir(tmp_path) == []


def test_bad_range_from_the_shell(tmp_path):
    result = run_cli("sweep", FFN, "B=4", "D=1024:4096", "F=8", "--csv", tmp_path / "out.csv")
    assert result.returncode == 2
    assert "bad range '1024:4096' for dimension D" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.listdir(tmp_path) == []


def test_interrupted_sweep_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from symflops.commands import sweep as sweep_module
    out = tmp_path / "out.csv"
    out.write_text("old")
    calls = []
    real = sweep_module.format_rows

    def format_rows(table):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(table)

    monkeypatch.setattr(sweep_module, "format_rows", format_rows)
    monkeypatch.setattr(sweep_module, "BLOCK", 10)
    assert cli.main(["sweep", str(FFN), "B=1:50:1", "D=2", "F=3", "--csv", str(out)]) == 130
    assert out.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.csv"]

"""An interrupted or failing ``symflops build`` never damages what was built:
files it had not reached are byte-identical, files it rewrote are whole, and
no temporary file is left behind."""

import io
import os
import shutil
from pathlib import Path

import pytest

from symflops.commands import build as build_module
from symflops.commands import pool as pool_module
from symflops.commands.build import build
from symflops.commands.output import write_file as atomic_write

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["attention_scores", "dropout", "embedding", "ffn"]  # quick to derive


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    """SMALL built once for the module (the tests below each get a copy)."""
    root = tmp_path_factory.mktemp("built")
    src, out = root / "src", root / "out"
    src.mkdir()
    for name in SMALL:
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src / f"{name}.yaml")
    result = build(str(src), str(out), pdf=False)
    assert not result.failed and len(result.written) == 2 * len(SMALL)
    return src, out


@pytest.fixture
def built(first_build, tmp_path):
    """A finished build of SMALL in this test's directory: its sources, its
    output folder, and the output's bytes."""
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(first_build[0], src)
    shutil.copytree(first_build[1], out)
    return src, out, snapshot(out)


def snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir())}


def no_temporary_files(directory):
    return not [p for p in Path(directory).iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt])
def test_build_stopped_at_the_third_declaration(built, monkeypatch, tmp_path, interruption):
    src, out, before = built
    # A clean build in MACs: what a finished second build would have written.
    macs = build(str(src), str(tmp_path / "macs"), pdf=False, unit="MACs")
    expected = snapshot(tmp_path / "macs")
    calls = []
    real_render = build_module.render

    def render(*args, **kwargs):
        calls.append(args)
        if len(calls) == 5:  # md of the third declaration (two sheets each)
            raise interruption("stopped halfway")
        return real_render(*args, **kwargs)

    monkeypatch.setattr(build_module, "render", render)
    with pytest.raises(interruption):
        build(str(src), str(out), pdf=False, unit="MACs")
    after = snapshot(out)
    assert set(after) == set(before)
    done, untouched = SMALL[:2], SMALL[2:]
    for name in done:  # rewritten, whole
        for fmt in ("md", "tex"):
            assert after[f"{name}.{fmt}"] == expected[f"{name}.{fmt}"] != before[f"{name}.{fmt}"]
    for name in untouched:  # never reached: byte-identical
        for fmt in ("md", "tex"):
            assert after[f"{name}.{fmt}"] == before[f"{name}.{fmt}"]
    assert no_temporary_files(out)
    assert not macs.failed


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_interrupted_while_writing_one_file(built, monkeypatch, interruption):
    """The write itself stops (a full disk, Ctrl-C between write and rename):
    the old file stays and the temporary file is removed.  An OSError is bad
    luck with the output, not a bug: that declaration fails (exit 2)."""
    src, out, before = built
    real_replace = os.replace
    replaced = []
    per_declaration = len(before) // len(SMALL)  # its sheets and its figures

    def replace(a, b):
        if len(replaced) == per_declaration:  # the first file of the second declaration
            raise interruption("stopped before the rename")
        replaced.append(b)
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)
    if interruption is OSError:  # reported for each declaration it hits; the build goes on
        result = build(str(src), str(out), pdf=False, unit="MACs", stderr=io.StringIO())
        assert result.failed == [str(src / f"{name}.yaml") for name in SMALL[1:]]
    else:
        with pytest.raises(interruption):
            build(str(src), str(out), pdf=False, unit="MACs")
    after = snapshot(out)
    assert set(after) == set(before)
    changed = {n for n in after if after[n] != before[n]}
    # only whole renamed files changed (the graph, the same in MACs, is rewritten as it
    # was; so is the roofline figure, which compares FLOPs with peak FLOP/s in any unit)
    assert changed == {Path(p).name for p in replaced
                       if not p.endswith(".graph.pdf") and ".roofline." not in p}
    assert no_temporary_files(out)


def test_atomic_write_cleans_up_when_the_data_cannot_be_written(tmp_path):
    target = tmp_path / "sheet.md"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_write(str(target), object())  # not str or bytes: fails inside the write
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["sheet.md"]


def test_atomic_write_cleans_up_when_interrupted_right_after_creating_the_file(
        tmp_path, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)  # after the data, before the rename
    with pytest.raises(KeyboardInterrupt):
        atomic_write(str(tmp_path / "sheet.md"), "new")
    assert os.listdir(tmp_path) == []


#: ffn.yaml's block repeated L times: the smallest model that includes a block.
STACK = """name: stack
title: Feed-forward blocks stacked L deep
dims: {L: blocks, B: tokens in the batch, D: model width, F: hidden width}
tensors:
  X0: {shape: [B, D], role: input, description: the input}
ops:
  - include: ffn.yaml
    repeat: L
    tensors: {X: X0, Y: XL}
examples:
  small: {L: 2, B: 3, D: 5, F: 7}
"""


def test_parallel_build_writes_the_same_files(tmp_path):
    """-j 2 derives in worker processes; the sheets must be byte-identical to a
    sequential build's, and a failing declaration is still reported."""
    import shutil

    from symflops.commands.build import build as build_all

    src = tmp_path / "src"
    src.mkdir()
    for name in ("ffn", "dropout"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src)
    # a model with its block, which one worker derives together
    (src / "stack.yaml").write_text(STACK)
    (src / "zz_bad.yaml").write_text("dims: {B: b}\ntensors: {}\nops:\n  - Y[b] = Q[b]\n")
    import io
    one = build_all(str(src), str(tmp_path / "one"), pdf=False, stdout=io.StringIO(),
                    stderr=io.StringIO())
    err = io.StringIO()
    two = build_all(str(src), str(tmp_path / "two"), pdf=False, jobs=2, stdout=io.StringIO(),
                    stderr=err)
    assert [os.path.basename(p) for p in one.written] == [os.path.basename(p) for p in two.written]
    assert {os.path.basename(p) for p in one.written} >= {"stack.md", "stack.tex"}
    for p in one.written:
        assert (tmp_path / "two" / os.path.basename(p)).read_bytes() == open(p, "rb").read()
    assert len(two.failed) == 1 and "unknown tensor 'Q'" in err.getvalue()


def test_parallel_groups_keep_a_model_with_its_blocks():
    """A worker gets a model together with the blocks it includes (so their
    shared ops are derived once); unrelated declarations stand alone."""
    names = ["ffn", "llama", "llama_block", "llama_tied", "moe", "moe_block", "dropout"]
    groups = pool_module._groups([str(ROOT / "derivations" / f"{n}.yaml") for n in names])
    named = [[Path(p).stem for p in g] for g in groups]
    assert sorted(map(sorted, named)) == sorted([["llama", "llama_block", "llama_tied"],
                                                 ["moe", "moe_block"], ["ffn"], ["dropout"]])


_SHEETS = build_module._sheets


def _leaky_sheets(path, **kwargs):
    """The build's work, after making a temporary file it never removes (a
    module-level function: the workers receive it pickled)."""
    import tempfile

    tempfile.mkstemp()
    return _SHEETS(path, **kwargs)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_library_temporary_left_behind_goes_with_the_build(tmp_path, monkeypatch, jobs):
    """A library stopped between creating a temporary file and removing it (a
    SIGTERM lands there: matplotlib makes one while it embeds a font) leaves
    nothing in TMPDIR: a build sends the libraries' temporaries to a directory
    of its own and removes it.  The stand-in below never removes its file."""
    import tempfile

    scratch, src = tmp_path / "tmp", tmp_path / "src"
    scratch.mkdir()
    src.mkdir()
    for name in ("dropout", "ffn"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src / f"{name}.yaml")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(build_module, "_sheets", _leaky_sheets)
    result = build(str(src), str(tmp_path / "out"), pdf=False, jobs=jobs,
                   stdout=io.StringIO(), stderr=io.StringIO())
    assert not result.failed
    assert list(scratch.iterdir()) == []
    assert tempfile.tempdir == str(scratch)  # restored

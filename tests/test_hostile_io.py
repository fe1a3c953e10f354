"""Bad input that is not a declaration: output paths, include paths, files that
are not regular files, templates, hostile names, a build with one bad
declaration, signals.  Each gets exit 2 and a message (never a traceback,
never exit 70); nothing at an output path that is not a regular file is
replaced; no file's contents are echoed; nothing is left behind.

Rows are (what is run, expected exit status, expected fragment of stderr).
Every expected value here is written by hand from the behaviour the README
states, not read off the code.  No test writes to a real device: device
nodes, FIFOs and links are made in ``tmp_path`` (a test that failed on a
build that replaces such nodes replaces only those copies).
"""

import errno
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from symflops import cli
from symflops.commands import build as build_module
from symflops.commands.build import build, pdflatex_available
from symflops.sheets.escape import TEX_SETTABLE
import forked

ROOT = Path(__file__).resolve().parent.parent
FFN = ROOT / "derivations" / "ffn.yaml"


def _limits():  # a runaway read must not take the machine's memory with it
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def run(*args, timeout=900, env=None, cwd=None, stdout=subprocess.PIPE):
    full_env = {**os.environ, **(env or {})}
    if stdout == subprocess.PIPE:  # a process forked from one that has imported symflops
        return forked.run(*args, timeout=timeout, env=full_env, cwd=cwd, address_space=3 << 30)
    return subprocess.run([sys.executable, "-m", "symflops", *map(str, args)],
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout,
                          env=full_env, cwd=cwd, preexec_fn=_limits)


def main(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def clean(result):
    assert "Traceback" not in result.stderr, result.stderr
    return result


# ------------------------------------------------------------ output paths --

def _inputs(tmp_path):
    path = tmp_path / "in.npz"
    rng = np.random.default_rng(0)
    np.savez(path, X=rng.standard_normal((2, 3)), W_in=rng.standard_normal((3, 4)),
             W_out=rng.standard_normal((4, 3)))
    return path


#: Each command that writes a file, with its output option last.
WRITERS = {
    "render -o": lambda t: ["render", FFN, "-o"],
    "sweep --csv": lambda t: ["sweep", FFN, "B=2", "D=3", "F=4", "--csv"],
    "grads --out": lambda t: ["grads", FFN, "--inputs", _inputs(t), "--out"],
    "plan --plot": lambda t: ["plan", "--params", "7e9", "--tokens", "2e12", "--sustained",
                              "4e14", "--plot"],
}


def _fifo(t):
    os.mkfifo(t / "node.png")
    return t / "node.png"


def _device(t):
    try:
        os.mknod(t / "node.png", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a null device
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    return t / "node.png"


def _link_to_stdout(t):
    os.symlink("/proc/self/fd/1", t / "node.png")  # what /dev/stdout is
    return t / "node.png"


def _dangling(t):
    os.symlink(t / "nowhere" / "x.png", t / "node.png")
    return t / "node.png"


def _directory(t):
    (t / "node.png").mkdir()
    return t / "node.png"


def _under_a_file(t):
    (t / "file").write_text("a file")
    return t / "file" / "node.png"


#: (the path, the fragment of the message, what must still be true of it)
TARGETS = {
    "fifo": (_fifo, "is a FIFO", lambda p: stat.S_ISFIFO(os.lstat(p).st_mode)),
    "device": (_device, "is a character device", lambda p: stat.S_ISCHR(os.lstat(p).st_mode)),
    "link to stdout": (_link_to_stdout, "/dev/stdout",
                       lambda p: os.readlink(p) == "/proc/self/fd/1"),
    "dangling link": (_dangling, "dangling", lambda p: os.path.islink(p) and not p.parent.joinpath(
        "nowhere").exists()),
    "directory": (_directory, "is a directory", lambda p: p.is_dir() and not list(p.iterdir())),
    "under a file": (_under_a_file, "a part of the path is a file",
                     lambda p: p.parent.read_text() == "a file"),
    "empty": (lambda t: "", "the path is empty", lambda p: True),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", TARGETS)
def test_an_output_path_that_is_not_a_regular_file_is_refused(tmp_path, capsys, writer, kind):
    make, fragment, intact = TARGETS[kind]
    path = make(tmp_path)
    code, out, err = main([*WRITERS[writer](tmp_path), path], capsys)
    assert code == 2, err
    assert fragment in err and "fix: " in err, err
    if path:
        assert intact(Path(path)), f"{path} was replaced"
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_dash_writes_each_format_to_standard_output(tmp_path, capfdbinary):
    expected = {"render -o": b"# Transformer feed-forward block", "sweep --csv": b"B,D,F,",
                "grads --out": b"PK\x03\x04", "plan --plot": b"\x89PNG"}
    for writer, head in expected.items():
        assert cli.main([str(a) for a in WRITERS[writer](tmp_path)] + ["-"]) == 0
        out = capfdbinary.readouterr().out
        assert out.startswith(head), (writer, out[:40])
    assert not (tmp_path / "-").exists()


def test_a_link_to_a_regular_file_is_written_through(tmp_path, capsys):
    """The link stays a link; the file it names gets the sheet (README: output paths)."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "sheet.md"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.md"
    os.symlink("real/sheet.md", link)
    code, out, err = main(["render", FFN, "-o", link], capsys)
    assert code == 0, err
    assert os.readlink(link) == "real/sheet.md"
    assert target.read_text().startswith("# Transformer feed-forward block")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # an existing file keeps its mode
    assert not list(tmp_path.rglob(".tmp-*"))


def test_build_out_must_be_a_directory(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for out, fragment in ((tmp_path / "file", "not a directory"), ("", "the path is empty"),
                          ("-", "takes a directory")):
        code, _, err = main(["build", "--src", ROOT / "derivations", "--out", out, "--no-pdf"],
                            capsys)
        assert code == 2 and fragment in err, err
    assert (tmp_path / "file").read_text() == "x"


def test_build_refuses_a_sheet_path_that_is_a_fifo_and_builds_the_rest(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for name in ("ffn", "dropout"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src)
    os.mkfifo(out / "dropout.md")
    code, _, err = main(["build", "--src", src, "--out", out, "--format", "md"], capsys)
    assert code == 2 and "dropout.md: is a FIFO" in err, err
    assert stat.S_ISFIFO(os.lstat(out / "dropout.md").st_mode)
    assert (out / "ffn.md").read_text().startswith("# Transformer feed-forward block")


def _refuse_writes_in(monkeypatch, folder, error):
    real_open = os.open

    def fake(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.path.abspath(path)) == str(folder):
            raise OSError(error, os.strerror(error), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_read_only_directory_is_exit_2(tmp_path, capsys, monkeypatch, writer):
    """As root a mode-0555 directory is still writable, so the kernel's refusal
    is simulated where the temporary file is created (test below: the real one)."""
    argv = [*WRITERS[writer](tmp_path), tmp_path / "ro" / "out.png"]
    (tmp_path / "ro").mkdir()
    _refuse_writes_in(monkeypatch, tmp_path / "ro", errno.EACCES)
    code, _, err = main(argv, capsys)
    assert code == 2 and "Permission denied" in err and "fix: " in err, err
    assert not list((tmp_path / "ro").iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_real_read_only_directory_is_exit_2(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        result = clean(run("render", FFN, "-o", tmp_path / "ro" / "ffn.md"))
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert result.returncode == 2 and "Permission denied" in result.stderr


@pytest.mark.parametrize("call", ["write", "fsync"])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_full_disk_is_exit_2_and_keeps_the_old_file(tmp_path, capsys, monkeypatch, writer,
                                                      call):
    out = tmp_path / "out.png"
    out.write_bytes(b"old")
    argv = [*WRITERS[writer](tmp_path), out]
    real = getattr(os, call)

    def full(fd, *args):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(tmp_path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)

    monkeypatch.setattr(os, call, full)
    code, _, err = main(argv, capsys)
    assert code == 2 and "No space left on device" in err, err
    assert out.read_bytes() == b"old"
    assert not list(tmp_path.glob(".tmp-*"))


def test_standard_output_on_a_full_disk_is_exit_2():
    with open("/dev/full", "w") as full:  # writing to /dev/full fails with ENOSPC
        result = run("derive", FFN, stdout=full)
    assert result.returncode == 2, result.stderr
    assert "cannot write standard output: No space left on device" in result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


# ---------------------------------------------------------------- includes --

PASSWD = ("root:x:0:0:root:/root:/bin/bash\n"
          "alice:$6$s4ltS4lt$Q2hhbmdlTWVQbGVhc2VUaGlzSXNBRmFrZUhhc2g:19000:0:99999:7:::\n")
HASH = "Q2hhbmdlTWVQbGVhc2VUaGlzSXNBRmFrZUhhc2g"


def _tree(tmp_path, include, extra=""):
    """tmp/outside/secret (a passwd-like file) and tmp/tree/main.yaml including ``include``."""
    (tmp_path / "outside").mkdir(exist_ok=True)
    (tmp_path / "outside" / "secret").write_text(PASSWD)
    (tmp_path / "outside" / "block.yaml").write_text(BLOCK)
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "main.yaml").write_text(
        "dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, D], role: input}\nops:\n"
        f"  - include: {include}\n{extra}")
    return tree / "main.yaml"


BLOCK = ("dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, D], role: input}\n"
         "  W: {shape: [D, D], role: param}\nops:\n  - Y[b,e] = X[b,d] W[d,e]\n")


@pytest.mark.parametrize("include", ["'{out}/secret'", "../outside/secret", "link/secret",
                                     "'{out}/block.yaml'", "sub/../../outside/block.yaml"])
def test_an_include_outside_the_declarations_tree_is_refused(tmp_path, capsys, include):
    main_yaml = _tree(tmp_path, include.format(out=tmp_path / "outside"))
    os.symlink(tmp_path / "outside", tmp_path / "tree" / "link")
    (tmp_path / "tree" / "sub").mkdir()
    code, out, err = main(["derive", main_yaml], capsys)
    assert code == 2, err
    column = 15 if include.startswith("'") else 14  # a quoted path starts after its quote
    assert f"{main_yaml}:5:{column}: error: cannot include" in err and "is outside" in err, err
    assert HASH not in err and "root:x:0" not in err


def test_the_include_path_widens_the_tree(tmp_path, capsys, monkeypatch):
    main_yaml = _tree(tmp_path, "block.yaml")
    code, _, err = main(["derive", main_yaml], capsys)
    assert code == 2 and "block.yaml: no such file" in err, err  # looked for beside main.yaml
    monkeypatch.setenv("SYMFLOPS_INCLUDE_PATH", str(tmp_path / "outside"))
    code, out, err = main(["derive", main_yaml, "--json"], capsys)
    assert code == 0, err
    assert '"dW[d,e] = X[b,d] dY[b,e]"' in out  # the block's op, derived


def test_an_include_in_a_subdirectory_is_inside(tmp_path, capsys):
    main_yaml = _tree(tmp_path, "blocks/block.yaml")
    (tmp_path / "tree" / "blocks").mkdir()
    (tmp_path / "tree" / "blocks" / "block.yaml").write_text(BLOCK)
    code, out, err = main(["derive", main_yaml], capsys)
    assert code == 0, err


@pytest.mark.parametrize("command", [["derive"], ["plan", "--tokens", "1e9"], ["verify"]])
@pytest.mark.parametrize("name,text,fragment", [
    ("passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/bin/sh\n",
     "passwd:1:1: error: a declaration must be a mapping, found text;"),
    ("shadow", PASSWD, "shadow:2:76: error: this is not valid YAML"),
])
def test_a_file_that_is_not_a_declaration_is_not_echoed(tmp_path, capsys, command, name, text,
                                                        fragment):
    secret = tmp_path / name
    secret.write_text(text)
    code, out, err = main([command[0], secret, *command[1:]], capsys)
    assert code == 2 and fragment in err, err
    assert len(err.splitlines()) == 1  # the message only: no line of the file under a caret
    assert HASH not in err and "root:x:0" not in err and "/bin/bash" not in err


# Issue 25 item 9: the excerpt rule went by the name given, so x.json, a link
# to /etc/shadow, had the file's first line printed under the caret, and an
# include of /etc/shadow (SYMFLOPS_INCLUDE_PATH=/) quoted its first entry as
# "unknown key 'root:*:...'".  A fake secret stands in for /etc/shadow (root
# can read the real one, another user cannot: it cannot be relied on).
SHADOW = ("root:$6$s4ltS4lt$Q2hhbmdlTWVQbGVhc2VUaGlzSXNBRmFrZUhhc2g:19000:0:99999:7:::\n"
          "daemon:*:19000:0:99999:7:::\n")


def _secret_links(tmp_path):
    (tmp_path / "outside").mkdir(exist_ok=True)
    secret = tmp_path / "outside" / "shadow"
    secret.write_text(SHADOW)
    for name in ("x.json", "x.yaml", "config.json"):
        os.symlink(secret, tmp_path / name)
    return secret


@pytest.mark.parametrize("argv", [
    ["plan", "--hf-config", "x.json", "--tokens", "1e9"],
    ["render", "--hf-config", "x.json"],
    ["import-hf", "config.json"],
    ["derive", "x.yaml"],
    ["derive", "x.json"],
    ["eval", "x.yaml", "B=1"],
])
def test_a_link_to_a_secret_under_a_quoted_name_is_not_echoed(tmp_path, capsys, argv):
    _secret_links(tmp_path)
    code, _, err = main([tmp_path / a if a.startswith(("x.", "config.")) else a for a in argv],
                        capsys)
    assert code == 2 and f"{tmp_path / argv[2 if argv[1] == '--hf-config' else 1]}:" in err, err
    assert len(err.splitlines()) == 1, err       # the message only, no line under a caret
    assert HASH not in err and "root:" not in err and "daemon" not in err, err


def test_a_mapping_that_is_not_a_declaration_has_none_of_its_keys_quoted(tmp_path, capsys,
                                                                         monkeypatch):
    """The shadow format reads as a YAML mapping ('root:...:7::' is a key, its
    last ':' the indicator): a file none of whose keys is a declaration's is
    refused as not a declaration, by position, whether named on the command
    line or included."""
    secret = _secret_links(tmp_path)
    (tmp_path / "outside" / "shadow.yaml").write_text(SHADOW)
    monkeypatch.setenv("SYMFLOPS_INCLUDE_PATH", str(secret.parent))
    for include, argv in ((None, ["derive", tmp_path / "outside" / "shadow.yaml"]),
                          ("shadow", None), ("shadow.yaml", None)):
        argv = argv or ["derive", _tree(tmp_path, include)]
        code, _, err = main(argv, capsys)
        where = secret.parent / (include or "shadow.yaml")
        assert code == 2 and (f"{where}:1:1: error: this file is not a declaration: none of its "
                              "top-level keys is one a declaration has") in err, err
        assert len(err.splitlines()) == 1, err
        assert HASH not in err and "root:" not in err and "daemon" not in err, err


def test_a_yaml_error_in_a_file_that_is_not_a_declaration_shows_no_line(tmp_path, capsys):
    # the shadow's first entry, then a line YAML cannot read: a mapping with no
    # declaration key up to the error
    path = tmp_path / "secret.yaml"
    path.write_text(SHADOW + "alice:$6$" + HASH + ": {X: ]}\n")
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and f"{path}:" in err and "this is not valid YAML" in err, err
    assert len(err.splitlines()) == 1 and HASH not in err, err
    # a declaration with the same error further on keeps its line under the caret
    path.write_text("dims: {B: b}\ntensors: {X: ]}\n")
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and f"{path}:2:14: error: this is not valid YAML" in err, err
    assert err.splitlines()[1:] == ["    tensors: {X: ]}", " " * 17 + "^"], err


def test_a_link_into_etc_is_never_quoted(tmp_path, capsys, monkeypatch):
    link = tmp_path / "x.json"
    os.symlink("/etc/passwd", link)
    code, _, err = main(["plan", "--hf-config", link, "--tokens", "1e9"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "root:" not in err, err
    from symflops.core import errors
    assert not errors.quotable(str(link))
    # a file quotable by its name and its contents, in a private directory: a
    # stand-in for /etc made private here, holding a declaration with an error
    private = tmp_path / "private"
    private.mkdir()
    (private / "d.yaml").write_text("dims: {B: b}\ntensors: {}\nops: []\ntitle: [1]\n")
    code, _, err = main(["derive", private / "d.yaml"], capsys)
    assert code == 2 and len(err.splitlines()) == 3, err   # quoted: not private yet
    monkeypatch.setattr(errors, "PRIVATE_DIRS", (*errors.PRIVATE_DIRS, str(private)))
    os.symlink(private / "d.yaml", tmp_path / "d.yaml")
    for path in (private / "d.yaml", tmp_path / "d.yaml"):
        code, _, err = main(["derive", path], capsys)
        assert code == 2 and f"{path}:4:8: error: 'title' must be text" in err, err
        assert len(err.splitlines()) == 1, err
    os.mkdir(tmp_path / ".ssh")
    (tmp_path / ".ssh" / "config.yaml").write_text("dims: {}\n")
    (tmp_path / "plain.yaml").write_text("dims: {}\n")
    assert errors.quotable(str(tmp_path / "plain.yaml"))
    assert not errors.quotable(str(tmp_path / ".ssh" / "config.yaml"))


def test_a_long_value_is_quoted_short(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text("dims: {B: b}\ntensors: " + "x" * 100_000 + "\nops: []\n")
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and "must be a mapping, found the text 'xxx" in err, err
    assert len(err) < 1000, len(err)


def test_a_long_line_is_shown_as_a_window_around_the_column(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text("dims: {B: b}\ntensors: {}\nops: []\ntitle: [" + "1, " * 40_000 + "2]\n")
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and f"{path}:4:8: error: 'title' must be text" in err, err
    assert len(err) < 1000, len(err)
    line, caret = err.splitlines()[1:3]
    assert line.endswith("...") and len(line) < 100
    assert line[caret.index("^")] == "["  # the caret is still under the column


def test_a_non_utf8_file_is_reported_at_line_and_column(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"dims: {B: b}\ntitle: caf\xe9 au lait\n")
    code, _, err = main(["derive", path], capsys)
    # 'title: caf' is 10 characters: the byte 0xe9 is column 11 of line 2
    assert code == 2 and f"{path}:2:11: error: " in err and "not UTF-8" in err, err


# -------------------------------------------- files that are not regular --

def test_a_fifo_or_a_device_is_never_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    rows = [
        (["derive", fifo], "is a FIFO"),
        (["derive", "/dev/zero"], "is a character device"),
        (["plan", fifo, "--tokens", "1e9"], "is a FIFO"),
        (["derive", _tree(tmp_path, "fifo.yaml")], "is a FIFO"),
    ]
    os.mkfifo(tmp_path / "tree" / "fifo.yaml")
    for argv, fragment in rows:
        result = clean(run(*argv, timeout=900))
        assert result.returncode == 2 and fragment in result.stderr, (argv, result.stderr)


def test_an_include_of_dev_zero_stops_at_once(tmp_path):
    main_yaml = _tree(tmp_path, "zero")
    result = clean(run("derive", main_yaml, timeout=900, env={"SYMFLOPS_INCLUDE_PATH": "/dev"}))
    assert result.returncode == 2 and "cannot include /dev/zero" in result.stderr
    assert "is a character device" in result.stderr


def test_a_declaration_over_the_read_limit_is_refused(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(FFN.read_text() + ("# padding\n" * 110_000))  # 1.1 MB > 1 MiB
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and "larger than the read limit of 1,048,576 bytes (1 MiB)" in err, err
    path.write_text(FFN.read_text() + ("# padding\n" * 100_000))  # 1.0 MB < 1 MiB: fine
    code, _, err = main(["derive", path], capsys)
    assert code == 0, err


# -------------------------------------------------------------- templates --

TEMPLATES = [
    ("{{ cycler.__init__.__globals__.os.system('touch MARKER') }}\n",
     "sheet.md.j2:1: refused by the sandbox"),
    ("first\n{{ name.__class__.__mro__ }}\n", "sheet.md.j2:2: refused by the sandbox"),
    ("{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}\n", "calls itself without end"),
    ("first\n{{ 1 / 0 }}\n", "sheet.md.j2:2: the template raised ZeroDivisionError"),
    ("first\n{{ no_such_variable }}\n", "sheet.md.j2:2: 'no_such_variable' is undefined"),
    ("first\n\n{% include 'nope.j2' %}\n", "sheet.md.j2:3: template not found: nope.j2"),
    ("first\n{% if %}\n", "sheet.md.j2:2: syntax error"),
    ("{{ 'x' * 10**10 }}\n", "sheet.md.j2:1: a repetition longer than a sheet may be"),
    ("{{ 2 ** 100000000 }}\n", "sheet.md.j2:1: the power 2 ** 100000000 is too large"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
     "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}\n",
     "the sheet grew beyond 33,554,432 characters"),
]


@pytest.mark.parametrize("text,fragment", TEMPLATES, ids=[f for _, f in TEMPLATES])
def test_a_bad_user_template_is_exit_2_with_its_line(tmp_path, text, fragment):
    marker = tmp_path / "pwned"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "sheet.md.j2").write_text(text.replace("MARKER", str(marker)))
    result = clean(run("render", FFN, "--templates", tmp_path / "t", timeout=900))
    assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert "fix: " in result.stderr
    assert not marker.exists(), "the template ran a shell command"


def test_a_template_that_is_a_fifo_is_not_read(tmp_path):
    (tmp_path / "t").mkdir()
    os.mkfifo(tmp_path / "t" / "sheet.md.j2")
    result = clean(run("render", FFN, "--templates", tmp_path / "t", timeout=900))
    assert result.returncode == 2 and "is a FIFO" in result.stderr


# --------------------------------------------------------------- escaping --

HOSTILE_NAME = "evil\n<img src=x onerror=alert(1)>.yaml"
HOSTILE = """\
title: "Sneaky\\r# Heading <b>bold</b> 50% $x$ & {y} ~z^ back\\\\slash"
dims:
  _: "an underscore\\r\\n# not a heading"
  D: width
tensors:
  X: {shape: [_, D], role: input, description: "<script>alert(1)</script> | pipe"}
  _W: {shape: [D, D], role: param, description: "under_score #hash"}
ops:
  - Y[_, e] = X[_, d] _W[d, e]
"""


def _outside_code(md):
    """The Markdown text outside code spans and math, where HTML would be live."""
    return re.sub(r"(?<!\\)\$[^$]*(?<!\\)\$", "", re.sub(r"`[^`\n]*`", "", md))


def test_hostile_names_render_literally(tmp_path):
    path = tmp_path / HOSTILE_NAME
    path.write_text(HOSTILE)
    md = clean(run("render", path)).stdout
    assert md.startswith("# Sneaky # Heading &lt;b&gt;bold&lt;/b&gt; 50% \\$x\\$ &amp; {y} "
                         "\\~z^ back\\\\slash\n")
    assert "\r" not in md
    assert not re.search(r"^#+ (Heading|not a heading)", md, re.M)  # no heading made by the text
    assert "<" not in _outside_code(md)  # no raw HTML: <img>, <b>, <script> are all escaped
    assert "`evil\\n<img src=x onerror=alert(1)>.yaml`" in md  # the name, in one code span
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| pipe" in md
    assert r"$\mathit{\_}$, an underscore  # not a heading" in md   # the dims' paragraph
    tex = clean(run("render", path, "--format", "tex")).stdout
    assert (r"\title{Sneaky # Heading" not in tex
            and r"\title{Sneaky \# Heading \textless{}b\textgreater{}bold\textless{}/b"
                r"\textgreater{} 50\% \$x\$ \& \{y\} \textasciitilde{}z\textasciicircum{} "
                r"back\textbackslash{}slash}" in tex)
    assert r"\texttt{evil\textbackslash{}n\textless{}img src=x onerror=alert(1)\textgreater{}.yaml}" in tex
    if pdflatex_available():
        pdf = build_module.compile_pdf(tex, "hostile")
        assert pdf.startswith(b"%PDF")
        if shutil.which("mutool"):
            (tmp_path / "h.pdf").write_bytes(pdf)
            text = subprocess.run(["mutool", "draw", "-F", "txt", tmp_path / "h.pdf"],
                                  capture_output=True, text=True).stdout
            assert "Sneaky # Heading <b>bold</b> 50% $x$ & {y} ~z^ back\\slash" in text
            assert "evil\\n<img src=x onerror=alert(1)>.yaml" in text.replace("\n", "")


# Format characters (Unicode category Cf): U+202E RIGHT-TO-LEFT OVERRIDE shows
# the text after it reversed ("invoice\u202efdp.exe" reads "invoiceexe.pdf"),
# U+2066..2069 isolate, U+200B..200F are zero-width, U+FEFF a BOM, U+00AD a
# soft hyphen.  Like control characters, each is a space in sheet text and its
# escape in a code span (README, Escaping).
FORMAT_TITLE = "Pay \u202eexe.fdp\u202c now \u2066iso\u2069 zero\u200bwidth bom\ufeff shy\u00ad"
FORMAT_NAME = "bill\u202efdp.yaml"
FORMAT = f"""\
title: "{FORMAT_TITLE}"
dims:
  B: "batch\\u200f"
  D: width
tensors:
  X: {{shape: [B, D], role: input, description: "in\\u2067put"}}
  W: {{shape: [D, D], role: param}}
ops:
  - Y[b, e] = X[b, d] W[d, e]
"""


def test_format_characters_never_reach_a_sheet(tmp_path):
    path = tmp_path / FORMAT_NAME
    path.write_text(FORMAT)
    md = clean(run("render", path)).stdout
    assert not [c for c in md if unicodedata.category(c) == "Cf"]
    # each of the six format characters of the title a space, by hand:
    assert md.startswith("# Pay  exe.fdp  now  iso  zero width bom  shy \n"), md[:80]
    assert "`bill\\u202efdp.yaml`" in md           # the file name, escaped in its code span
    assert "batch " in md and "in put" in md
    tex = clean(run("render", path, "--format", "tex")).stdout   # exit 0: nothing refused
    assert not [c for c in tex if unicodedata.category(c) == "Cf"]
    assert r"\title{Pay  exe.fdp  now  iso  zero width bom  shy }" in tex
    assert r"\texttt{bill\textbackslash{}u202efdp.yaml}" in tex
    if pdflatex_available():
        assert build_module.compile_pdf(tex, "format").startswith(b"%PDF")


def test_format_characters_in_a_message_are_shown_escaped(tmp_path, capsys):
    path = tmp_path / "key.yaml"
    path.write_text('dims: {B: b}\ntensors: {}\nops: []\n"ti\\u202etle": x\n')
    code, _, err = main(["derive", path], capsys)
    assert code == 2 and "unknown key 'ti\\u202etle'" in err, err
    assert not [c for c in err if unicodedata.category(c) == "Cf"]


def test_a_figure_title_holds_no_line_break_or_format_character(tmp_path, monkeypatch):
    """matplotlib draws a figure's title as it is given (a line break starts a
    second line, U+202E reverses what follows): the name and the example's
    name reach it with each such character a space."""
    from symflops.count.cost import costs
    from symflops.count.explain import explain
    from symflops.declaration.reader import loads
    from symflops.derive.backward import derive
    from symflops.sheets import figures

    text = FFN.read_text().replace("name: ffn", 'name: "two\\nlines\\u202eflipped"')
    assert "two\\nlines" in text
    d = derive(loads(text, str(tmp_path / "ffn.yaml")))
    c = costs(d)
    titles = []
    monkeypatch.setattr(figures, "bars_figure", lambda rows, title, *a: titles.append(title) or b"")
    figures.draw(figures.figures_of(d, explain(d, c, [])), d, c, "md")
    assert titles and titles[0].startswith("two lines flipped at "), titles


EVIL_NAME = "evil\x1b]0;pwned\x07\n<img src=x onerror=alert(1)>"
LLAMA_DIMS = ["L=2", "V=100", "D=64", "N=4", "G=4", "E=16", "F=128"]


def test_user_text_in_terminal_reports_is_shown_escaped(tmp_path):
    """The name, the title and a file name reached the terminal as they were
    (derive's and plan's first line, build's 'wrote' lines): an escape
    sequence ran (ESC ] 0; sets a terminal's title), a line break began a
    line of the report, and plan --markdown let raw HTML through."""
    path = tmp_path / "evil.yaml"
    shutil.copy(ROOT / "derivations" / "llama_block.yaml", tmp_path)
    path.write_text((ROOT / "derivations" / "llama.yaml").read_text().replace(
        "name: llama\n", 'name: "evil\\e]0;pwned\\a\\n<img src=x onerror=alert(1)>"\n', 1))
    shown = "evil\\x1b]0;pwned\\x07\\n<img src=x onerror=alert(1)>"
    derive = clean(run("derive", path))
    assert derive.returncode == 0 and derive.stdout.startswith(shown + ": "), derive.stdout[:200]
    plan = clean(run("plan", "--tokens", "1e9", "--seq", "128", path, *LLAMA_DIMS))
    assert plan.returncode == 0 and plan.stdout.startswith(f"symflops plan: {shown} (evil.yaml)")
    markdown = clean(run("plan", "--tokens", "1e9", "--seq", "128", "--markdown", path,
                         *LLAMA_DIMS)).stdout
    assert markdown.startswith("**symflops plan**: evil \\]0;pwned  &lt;img src=x "
                               "onerror=alert(1)&gt; (evil.yaml);"), markdown[:200]
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FFN, src / "a\nb.yaml")
    build = clean(run("build", "--src", src, "--out", tmp_path / "out", "--format", "md"))
    assert build.returncode == 0 and f"wrote {tmp_path / 'out'}/a\\nb.md\n" in build.stdout
    for out in (derive.stdout, plan.stdout, markdown, build.stdout):
        assert "\x1b" not in out and "\x07" not in out
        assert not [line for line in out.splitlines() if line.startswith(("<img", "b.md"))]
    assert "<img" not in markdown


@pytest.mark.skipif(not pdflatex_available(), reason="pdflatex is not installed")
def test_latin_accents_compile_to_pdf(tmp_path):
    path = tmp_path / "accents.yaml"
    path.write_text(FFN.read_text().replace("title: Transformer feed-forward block",
                                            "title: Schätzung der Größe, café é ü"))
    tex = clean(run("render", path, "--format", "tex")).stdout
    assert r"\title{Schätzung der Größe, café é ü}" in tex
    assert build_module.compile_pdf(tex, "accents").startswith(b"%PDF")


@pytest.mark.skipif(not pdflatex_available(), reason="pdflatex is not installed")
def test_every_character_called_settable_compiles(tmp_path):
    """The table of characters the LaTeX sheet accepts, checked against pdflatex."""
    chars = "".join(chr(c) for a, b in TEX_SETTABLE for c in range(a, b + 1))
    path = tmp_path / "all.yaml"
    path.write_text(FFN.read_text().replace("title: Transformer feed-forward block",
                                            f"title: \"{chars}\""))
    tex = clean(run("render", path, "--format", "tex")).stdout
    assert build_module.compile_pdf(tex, "all").startswith(b"%PDF")


@pytest.mark.parametrize("title,char", [("Attention 注意", "U+6CE8"), ("Rocket 🚀 sheet", "U+1F680"),
                                        ("Greek λ", "U+03BB")])
def test_text_pdflatex_cannot_set_is_refused_for_latex_only(tmp_path, capsys, title, char):
    path = tmp_path / "wide.yaml"
    path.write_text(FFN.read_text().replace("title: Transformer feed-forward block",
                                            f"title: {title}"))
    column = len("title: ") + title.index(next(c for c in title if ord(c) > 0x7F)) + 1
    code, out, err = main(["render", path, "--format", "tex"], capsys)
    assert code == 2 and out == ""
    assert f"{path}:2:{column}: error: the title contains" in err and char in err, err
    code, out, err = main(["render", path], capsys)
    assert code == 0 and out.startswith(f"# {title}\n")


def test_a_build_writes_the_markdown_of_a_sheet_latex_cannot_set(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "wide.yaml").write_text(FFN.read_text().replace(
        "title: Transformer feed-forward block", "title: Attention 注意"))
    code, _, err = main(["build", "--src", src, "--out", out], capsys)
    assert code == 2 and "U+6CE8" in err
    # the Markdown sheet and the figures it shows (PNG), the HTML sheet read from it,
    # the gallery and the reference's pages (docs/, from the checkout's); no .tex, no .pdf
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".png") == \
        ["docs", "index.html", "wide.html", "wide.md"]


@pytest.mark.skipif(not pdflatex_available(), reason="pdflatex is not installed")
def test_a_latex_failure_names_the_line_and_a_true_hint(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "sheet.tex.j2").write_text(
        "\\documentclass{article}\n\\begin{document}\nfine\n\\undefinedmacro\n\\end{document}\n")
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    shutil.copy(FFN, src)
    result = clean(run("build", "--src", src, "--out", out, "--templates", tmp_path / "t"))
    assert result.returncode == 2
    assert "LaTeX failed on ffn.tex at line 4 of the .tex: Undefined control sequence" \
        in result.stderr, result.stderr
    assert "kept" not in result.stderr and "--format tex -o ffn.tex" in result.stderr
    # the claim: no .tex, no .pdf (the Markdown sheet's PNG figures are written with it,
    # and the HTML sheet with the gallery and the reference's pages)
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".png") == \
        ["docs", "ffn.html", "ffn.md", "index.html"]


# ------------------------------------------------------------------- build --

def _src(tmp_path, bad):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FFN, src)
    (src / "bad.yaml").write_text(bad)
    return src


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_recursive_alias_does_not_stop_the_build(tmp_path, jobs):
    src = _src(tmp_path, "a: &a [*a]\n")
    result = clean(run("build", "--src", src, "--out", tmp_path / "out", "--format", "md", "-j", jobs,
                       timeout=900))
    assert result.returncode == 2, result.stderr
    assert re.search(r"bad\.yaml:\d+:\d+: error: ", result.stderr), result.stderr
    assert (tmp_path / "out" / "ffn.md").read_text().startswith("# Transformer feed-forward")
    assert not (tmp_path / "out" / "bad.md").exists()


def test_a_huge_configuration_does_not_stop_the_build(tmp_path):
    """--at B=10**999: a positive integer, so the sheet takes it (a number
    with 1000 digits is typeset as 10^999), or it is refused cleanly; the
    rest of the build goes on either way."""
    src = _src(tmp_path, "a: &a [*a]\n")
    result = clean(run("build", "--src", src, "--out", tmp_path / "out", "--format", "md",
                       "--at", "B=10**999,D=1,F=1", timeout=900))
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr
    md = tmp_path / "out" / "ffn.md"
    if md.exists():  # 12 B D F = 1.2e1000 FLOPs of training
        row = next(l for l in md.read_text().splitlines() if l.startswith("| training (FLOPs) |"))
        assert row.endswith(r"| $1.2 \times 10^{1000}$ |")  # the --at column, after ffn's examples
    else:
        assert "10**999" in result.stderr


def test_a_bug_in_one_declaration_does_not_stop_the_others(tmp_path, monkeypatch):
    """An error that is not a SymflopsError (here a RuntimeError from the third
    of four renders) fails its declaration only; the build reports it as an
    internal error and exits 70."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    for name in ("dropout", "embedding", "ffn"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src)
    calls = []
    real = build_module.render

    def render(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:  # the Markdown of embedding
            raise RuntimeError("a bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(build_module, "render", render)
    import io
    err = io.StringIO()
    result = build(str(src), str(out), pdf=False, stdout=io.StringIO(), stderr=err)
    assert result.failed == result.internal == [str(src / "embedding.yaml")]
    assert "embedding.yaml: internal error: RuntimeError: a bug" in err.getvalue()
    sheets = sorted(p.name for p in out.iterdir() if ".graph." not in p.name
                    and not p.name.endswith((".png", ".components.pdf", ".flops.pdf",
                                             ".memory.pdf", ".roofline.pdf")))
    assert sheets == ["dropout.md", "dropout.tex", "ffn.md", "ffn.tex"]
    assert not any(p.name.startswith("embedding") for p in out.iterdir())


# ------------------------------------------------------------------- sweep --

def test_sweep_writes_exact_integers_in_a_column_with_rounded_values(tmp_path):
    out = tmp_path / "s.csv"
    result = clean(run("sweep", FFN, "B=3", "D=2**52", "F=1,2**53", "--csv", out))
    assert result.returncode == 0, result.stderr
    rows = [line.split(",") for line in out.read_text().splitlines()[1:]]
    # F = 1 is exact, F = 2**53 is not below 2**53: written as a float
    assert [r[2] for r in rows] == ["1", "9007199254740992.0"]
    # params 2 D F: 2**53 (not below 2**53) for F = 1; 2**106 for F = 2**53
    assert [r[7] for r in rows] == ["9007199254740992.0", repr(float(2**106))]


def test_sweep_beyond_float64_is_exit_2(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, D**40], role: input}\n"
                    "  W: {shape: [D**40], role: param}\nops:\n  - Y[b,e] = X[b,e] W[e]\n")
    # params = D**40 = 2**1200 at D = 2**30: beyond float64's 1.8e308
    result = clean(run("sweep", path, "B=1", "D=1,2**30", "--csv", tmp_path / "s.csv"))
    assert result.returncode == 2, result.stderr
    assert "exceeds float64's range" in result.stderr and "D=1073741824" in result.stderr
    assert not list(tmp_path.glob("*.csv")) and not list(tmp_path.glob(".tmp-*"))


# ----------------------------------------------------------------- signals --

#: A guard against a hung process only, never a deadline the machine must meet:
#: the signal tests wait on events (a file appears, the process exits), so a
#: loaded machine only makes them slower.  (A 60 s deadline on the exit failed
#: test_sigterm_during_build_... under load, with the build cleaning up as it must.)
HANG_S = 900.0


def _wait_for(predicate, proc):
    """Wait until ``predicate()`` holds, while ``proc`` runs; fail at once if
    it exits first (the event can no longer come)."""
    end = time.monotonic() + HANG_S
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the command exited ({proc.returncode}) before the event: "
                                 f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no event in {HANG_S:.0f} s: the command hangs")


def test_sigterm_during_sweep_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "s.csv"
    proc = subprocess.Popen([sys.executable, "-m", "symflops", "sweep", FFN, "B=1:2000:1",
                             "D=1:1000:1", "F=1:50:1", "--csv", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_limits)
    try:
        _wait_for(lambda: list(tmp_path.glob(".tmp-*")), proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def _running_in_group(pgid):
    """Processes of group ``pgid`` that are still running (zombies excluded)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(stat_file.parent.name)
    return found


@pytest.mark.skipif(not pdflatex_available(), reason="pdflatex is not installed")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigterm_during_build_leaves_no_scratch_directory(tmp_path, jobs):
    """SIGTERM to the whole process group, as timeout(1) sends it, while
    pdflatex runs: every symflops-tex-* directory is removed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    for name in ("ffn", "dropout", "embedding"):
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src)
    proc = subprocess.Popen([sys.executable, "-m", "symflops", "build", "--src", src, "--out",
                             tmp_path / "out", "-j", jobs],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)}, start_new_session=True)
    try:
        _wait_for(lambda: list(scratch.glob("symflops-tex-*/*.tex")), proc)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        left = _running_in_group(proc.pid)
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not left, f"still running: {left}"  # no worker, no pdflatex
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert list(scratch.iterdir()) == []
    out = tmp_path / "out"
    assert not out.exists() or not list(out.glob(".tmp-*"))


def test_ctrl_c_during_start_up_is_not_a_traceback(tmp_path):
    """A SIGINT while the command imports SymPy: a stand-in 'sympy' that
    interrupts itself makes the moment certain."""
    fake = tmp_path / "fake"
    (fake / "sympy").mkdir(parents=True)
    (fake / "sympy" / "__init__.py").write_text(
        # (SIGINT's handler set first: a process started in the background inherits it ignored)
        "import os, signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n")
    path = os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])])
    for command in ([sys.executable, "-m", "symflops", "derive", FFN],
                    [sys.executable, "-c", "import sys; from symflops.__main__ import main; "
                                           "sys.exit(main())", "derive", FFN]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=900,
                                env={**os.environ, "PYTHONPATH": path})
        assert result.returncode == 130, result.stderr
        assert result.stderr == "symflops: interrupted\n", result.stderr


def test_the_console_script_is_the_lazy_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'symflops = "symflops.__main__:main"' in text


def test_a_busy_worker_unwinds_once_whatever_signals_follow():
    """The process group's SIGTERM and the parent's own SIGTERM both reach a
    -j worker; the second must not interrupt the unwinding of the first
    (raised inside the removal of a scratch directory, it left the directory
    behind: seen as a flaky test_sigterm_during_build_... under load)."""
    code = textwrap.dedent("""
        import os, signal, sys
        from symflops.commands import pool
        from symflops.core.errors import Terminated
        pool._worker_start()
        pool._busy = True
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Terminated:
            pass
        else:
            sys.exit("the first signal did not unwind")
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # while unwinding
            os.kill(os.getpid(), signal.SIGINT)
        except Terminated:
            sys.exit("a second signal interrupted the unwinding")
        print("unwound once")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "unwound once"

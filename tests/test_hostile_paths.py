"""A config's path in the declaration ``import-hf`` writes: issue 25 item 4.

The path (its directory names the example, the title, a comment) was
spliced into the YAML as it was: a directory named
``x\\nprecision: fp32-adam\\n#`` ended the header comment and made
``precision: fp32-adam`` a key of the declaration (the parameter bytes
doubled), and a control character or a YAML line break (``\\x85``,
``\\u2028``, ``\\r``) made ``plan``/``render --hf-config`` exit 70.  Each
hostile name below must give the declaration a plainly named directory gives,
but for the comment, the title and the example's name, with the same counts
(Llama-3.2-1B: 1,235,814,400 parameters, counted by hand in
tests/test_hf_import.py), and no key of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import yaml

from symflops.hf.importer import shell_word
from test_hf_import import LLAMA32_1B
import forked

NAMES = [
    "x\nprecision: fp32-adam\n#",          # the brief's: a key after a line break
    'quote"d', "single'quote", "hash # and: colon", "back\\slash", "tab\there",
    "rtl\u202eoverride", "esc\x1b[31mape", "cr\rreturn", "nel\x85line", "ls\u2028sep",
    "ps\u2029sep", "bom\ufeffzw\u200b", "-rf", "$(touch pwned)", "del\x7fete", "{flow}: [x]",
    "--- ...", "&anchor *alias !tag", "%YAML 1.2",
]
PARAMS = 1_235_814_400


def cli(*args):
    """The command run in this process, through :func:`symflops.cli.main` as
    ``python -m symflops`` runs it: these tests are about the text a path
    becomes, not about the process (the path that is not UTF-8, below, and
    tests/test_hostile_io.py run whole processes).  In one process the
    imports are paid once and the ~20 names share SymPy's cache: 9.5 s a name
    became ~3 s."""
    from symflops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(map(str, args)))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _config(tmp_path, folder):
    (tmp_path / folder).mkdir()
    path = tmp_path / folder / "config.json"
    path.write_text(json.dumps(LLAMA32_1B, indent=2))
    return path


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    path = _config(tmp_path_factory.mktemp("plain"), "plain")
    result = cli("import-hf", path)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("folder", NAMES, ids=[repr(n) for n in NAMES])
def test_a_hostile_directory_name_changes_no_key_and_no_count(tmp_path, plain, folder):
    path = _config(tmp_path, folder)
    out = tmp_path / "model.yaml"
    result = cli("import-hf", path, "-o", out)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    text = out.read_text()
    data, reference = yaml.safe_load(text), yaml.safe_load(plain)
    assert "precision" not in data and list(data) == list(reference)
    # only the header's command, the title and the example's name differ
    differ = [(a, b) for a, b in zip(text.splitlines(), plain.splitlines()) if a != b]
    assert len(text.splitlines()) == len(plain.splitlines()), text
    assert [b.split(":")[0].split("`")[0] for _, b in differ] == [
        "# A whole-model declaration written by ", "title", '  "plain"'], differ
    # every written line is one printable line
    assert all(line.isprintable() for line in text.splitlines()), text
    (name,) = data["examples"]
    ev = cli("eval", out, "--example", name, "--json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["params"] == PARAMS


@pytest.mark.parametrize("folder", NAMES, ids=[repr(n) for n in NAMES])
def test_plan_and_render_take_a_hostile_directory_name(tmp_path, folder):
    path = _config(tmp_path, folder)
    for args in (["plan", "--hf-config", path, "--seq", "2048", "--tokens", "1e9"],
                 ["render", "--hf-config", path],
                 ["render", "--hf-config", path, "--format", "tex"]):
        result = cli(*args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
        lines = result.stdout.splitlines()
        if args[0] == "plan":   # the path on its line, escaped, not lines of its own
            said = [line for line in lines if "written from" in line]
            assert len(said) == 1 and "config.json by symflops import-hf" in said[0], said
        assert all(line.isprintable() for line in lines[:3]), lines[:3]   # title, header
    data = json.loads(cli("plan", "--hf-config", path, "--seq", "2048", "--json").stdout)
    assert data["params"]["total"] == PARAMS
    assert data["declaration"]["config"] == str(path)      # JSON carries the path exactly
    command = data["declaration"]["command"]
    assert command.isprintable(), command
    if shutil.which("bash"):   # the command's words are the path and the output, as a shell reads them
        words = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True,
                               check=True).stdout.split(b"\0")[:-1]
        assert words[:3] == [b"symflops", b"import-hf", str(path).encode()]
        assert words[3] == b"-o" and words[4].endswith(b".yaml") and not words[4].startswith(b"-")


@pytest.mark.parametrize("text", ["plain/config.json", "a b", "it's", "-x", "x\ny", "\u202e",
                                  "a\\b'c", "\x1b", "é", "\U0001F600"])
def test_a_shell_word_is_one_printable_word(text):
    word = shell_word(text)
    assert word.isprintable()
    if shutil.which("bash"):
        said = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True,
                              check=True).stdout
        assert said == (("./" if text.startswith("-") else "") + text).encode()


@pytest.mark.parametrize("text", ["plain", 'q"\\', "line\nbreak\r\x85\u2028\u2029", "\x1b\x00\x7f",
                                  "\u202e\u2066\ufeff\u200b", "é中😀", "#: - [x] {y} &a *b !c %d"])
def test_a_quoted_scalar_reads_back_as_the_text(text):
    from symflops.hf.emit import quoted
    from symflops.lang.yaml import SAFE_LOADER

    written = quoted(text)
    assert "\n" not in written and written.isprintable()
    assert yaml.load("k: " + written, Loader=SAFE_LOADER) == {"k": text}


def test_a_path_that_is_not_utf8_is_imported(tmp_path):
    """A byte that is not UTF-8 in a directory's name (Python reads it as a
    lone surrogate, which no YAML can hold): shown as its escape's text."""
    import os

    folder = os.fsencode(tmp_path) + b"/bad\xffname"
    os.mkdir(folder)
    with open(folder + b"/config.json", "w") as fh:
        fh.write(json.dumps(LLAMA32_1B))
    for args in (["import-hf"], ["plan", "--seq", "128", "--tokens", "1e9", "--hf-config"]):
        result = forked.run(*args, folder + b"/config.json", timeout=600, text=False)
        assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr
        assert b"bad\\udcffname" in result.stdout

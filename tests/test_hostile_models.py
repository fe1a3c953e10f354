"""Hostile Hugging Face configs and plan inputs: one clear line, exit 2.

Issue 14 items 8 and 15: a config.json nested 100,000 deep or holding a
5,000-digit integer made ``symflops plan`` exit 70 (a bug); a config the
reader does not understand must be refused by name, never guessed.  Each row
is (what the file holds, the expected exit code, a fragment of the message);
the real command line runs it, within a generous time, and prints no
traceback and nothing on standard output.  Expected messages are written
here by hand.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import forked

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
         "max_position_embeddings": 256}


def _text(data: dict) -> str:
    return json.dumps(data)


ROWS = [
    # (name, file contents, exit code, fragment)
    ("deep nesting", "[" * 100_000 + "]" * 100_000, 2, "nested too deeply"),
    ("deep object", '{"a":' * 100_000 + "1" + "}" * 100_000, 2, "nested too deeply"),
    ("5000-digit integer", '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", 2,
     "an integer of more than 30 digits"),
    ("huge dimension", _text({**LLAMA, "hidden_size": 10**20}), 2, "is beyond 10^12"),
    ("float dimension", _text({**LLAMA, "hidden_size": 1e400}).replace("Infinity", "1e400"), 2,
     "'hidden_size' must be a positive integer, found Infinity"),
    ("NaN probability", _text({**LLAMA, "attention_dropout": float("nan")}), 2,
     "'attention_dropout' must be a probability in [0, 1), found NaN"),
    ("array for a dimension", _text({**LLAMA, "hidden_size": [[1] * 1000]}), 2,
     "found a JSON array"),
    ("long key", _text({**LLAMA, "k" * 5000: 1}), 2, "key of 5000 characters is not one"),
    ("no model_type", _text({k: v for k, v in LLAMA.items() if k != "model_type"}), 2,
     "key 'model_type' is missing"),
    ("unknown model_type", _text({**LLAMA, "model_type": "bert"}), 2,
     'model_type "bert" is not a family symflops reads'),
    ("not an object", "[1, 2, 3]", 2, "must hold a JSON object, found list"),
    ("duplicate key", _text(LLAMA)[:-1] + ', "vocab_size": 7}', 2, "'vocab_size' appears twice"),
    ("not JSON", "{model_type: llama}", 2, "not valid JSON"),
    ("minified garbage", '{"model_type": "llama", ' + "x" * 300_000, 2, "not valid JSON"),
    ("too large", '{"model_type": "llama", "pad": "' + "x" * (1 << 20) + '"}', 2,
     "is larger than the read limit of 1,048,576 bytes (1 MiB)"),
    ("not UTF-8", b"\xff\xfe{}", 2, "config.json:1:1: error: this file is not UTF-8 text: byte 0xff"),
    ("a well-formed config", _text(LLAMA), 0, ""),
]


def _plan(path: str) -> subprocess.CompletedProcess:
    return forked.run("plan", "--hf-config", path, "--seq", "128", timeout=900)


@pytest.mark.parametrize("contents, code, fragment", [r[1:] for r in ROWS],
                         ids=[r[0] for r in ROWS])
def test_hostile_config_is_one_line_exit_2(tmp_path, contents, code, fragment):
    path = tmp_path / "config.json"
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        path.write_text(contents)
    result = _plan(str(path))
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if code == 2:
        assert result.stdout == ""
        assert fragment in result.stderr
        assert len(result.stderr) < 2000   # the file's contents are not echoed


def test_a_directory_a_fifo_and_a_device_are_not_config_files(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)   # opening a FIFO with no writer would block: it is refused unopened
    for path in (tmp_path, fifo, "/dev/zero"):
        result = _plan(str(path))
        assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    result = _plan(str(tmp_path / "absent.json"))
    assert result.returncode == 2 and "no such file" in result.stderr


# --- issue 25 item 10: null keys, bytes that are not UTF-8, keys found at their own place ---

def _lines(tmp_path, data, raw: bytes | None = None):
    path = tmp_path / "config.json"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(json.dumps(data, indent=2))   # one key a line, from line 2, column 3
    return str(path)


def test_a_null_key_is_reported_as_null_at_its_place(tmp_path):
    data = {"model_type": "llama", "hidden_size": None,
            **{k: v for k, v in LLAMA.items() if k not in ("model_type", "hidden_size")}}
    path = _lines(tmp_path, data)
    result = _plan(path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # "hidden_size" is the second key: line 3, column 3
    assert f"{path}:3:3: error: key 'hidden_size' is null" in result.stderr, result.stderr
    assert "missing" not in result.stderr


def test_a_null_model_type_is_reported_as_null_at_its_place(tmp_path):
    path = _lines(tmp_path, {"model_type": None, **{k: v for k, v in LLAMA.items()
                                                     if k != "model_type"}})
    result = _plan(path)
    assert result.returncode == 2
    assert f"{path}:2:3: error: key 'model_type' is null" in result.stderr, result.stderr


def test_a_byte_that_is_not_utf8_is_reported_at_its_line_and_column(tmp_path):
    # Latin-1 'é' (0xe9): line 3 is '  "_name_or_path": "caf' then the byte:
    # 2 spaces + 15 ('"_name_or_path"') + 2 (': ') + 4 ('"caf') = 23 before it, column 24
    path = _lines(tmp_path, None, b'{\n  "model_type": "llama",\n  "_name_or_path": "caf\xe9"\n}\n')
    result = _plan(path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{path}:3:24: error: this file is not UTF-8 text: byte 0xe9" in result.stderr, \
        result.stderr
    assert "position" not in result.stderr


def test_a_key_is_found_at_the_top_level_not_where_its_name_first_appears(tmp_path):
    """An ignored key holding an object with the same name inside, written
    first: the error is at the top-level key (line 6: '{', model_type, the
    object's three lines), not the nested one (line 4)."""
    data = {"model_type": "llama", "task_specific_params": {"hidden_size": 64},
            "hidden_size": "sixty-four",
            **{k: v for k, v in LLAMA.items() if k not in ("model_type", "hidden_size")}}
    path = _lines(tmp_path, data)
    result = _plan(path)
    assert result.returncode == 2
    assert f"{path}:6:3: error: key 'hidden_size' must be a positive integer" in result.stderr, \
        result.stderr

"""A Hugging Face ``config.json`` as a whole-model declaration.

:func:`import_config` reads the file (:mod:`symflops.hf.json_file`), finds
its family by ``model_type`` (never guessed from other keys), checks every
key (:func:`symflops.hf.config.check_keys`), and lets the family write the
declaration's text (:mod:`symflops.hf.families`).  The text is then read
back by the ordinary declaration reader, so every count of an imported
model comes out of the engine exactly as for a declaration written by hand.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import SymflopsError, printable
from .config import Config, check_common, check_keys, model_type_of
from .families import FAMILIES
from .families.common import ExpertsCount, Options
from .json_file import read_json
from .parts import AttentionCount


@dataclass(frozen=True)
class Imported:
    text: str            # the declaration's YAML text
    model_type: str
    example: str         # the name of its configuration under ``examples:``
    dims: dict[str, int]  # the config's dims (the example's values)
    file: str            # the config file it was written from
    attention: AttentionCount = "exact"
    #: the longest sequence the model takes, and the key that sets it (None: any)
    longest: tuple[int, str] | None = None
    experts: ExpertsCount = "model"
    #: whether transformers runs this model's experts otherwise than it defines them
    #: (then ``--experts executed`` writes the form it runs)
    executed_differs: bool = False
    #: the number every sequence length must be a multiple of, and the key (None: any)
    multiple: tuple[int, str] | None = None
    #: the config's context length (the value of S) and the key it comes from
    #: (``max_position_embeddings``; None: the config gives none)
    context: tuple[int, str] | None = None
    #: what else lets a length that is not such a multiple be counted ("": nothing)
    multiple_alternative: str = ""
    #: the text without the config's file name and values (the same for two
    #: configs of one shape: :meth:`symflops.hf.emit.Declaration.structure`)
    structure: str = ""

    @property
    def command(self) -> str:
        """The command that writes this declaration to a file, each path a
        shell word (:func:`shell_word`): a path with a space, a quote or a line
        break in it is one argument when the command is pasted."""
        extra = " --attention full-square" if self.attention == "full-square" else ""
        extra += " --experts executed" if self.experts == "executed" else ""
        return (f"symflops import-hf {shell_word(self.file)}{extra} "
                f"-o {shell_word(self.example + '.yaml')}")


def shell_word(path: str) -> str:
    """``path`` as one word of a POSIX shell command, printable: as it is when
    it needs no quoting, in single quotes when it holds only printable
    characters, else in ANSI-C quotes (``$'a\\x0ab'``, POSIX.1-2024, bash, zsh)
    with each character that is not printable as the escapes of its bytes; a relative path
    that starts with '-' is written ``./-x``, so that it is not an option."""
    if path.startswith("-"):
        path = "./" + path
    if all(c == " " or c.isprintable() for c in path):
        return shlex.quote(path)
    escaped = "".join("\\" + c if c in "\\'" else c if c == " " or c.isprintable()
                      else "".join(f"\\x{b:02x}" for b in _bytes(c)) for c in path)
    return f"$'{escaped}'"


def _bytes(c: str) -> bytes:
    """The bytes of ``c`` in a path (UTF-8; a byte that was not UTF-8, which
    Python reads as a lone surrogate, as that byte): ``$'\\xc2\\x85'`` is
    U+0085 in any locale, where ``$'\\u0085'`` depends on it."""
    try:
        return c.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return c.encode("utf-8", "surrogatepass")


def example_name(path: str) -> str:
    """The configuration's name: the config's directory (a checkpoint's
    name, e.g. ``Llama-2-7b-hf/config.json``), else the file's stem; each
    character but letters, digits and ``-_.`` an underscore, and a leading
    ``-`` too (``--example -rf`` would read as an option)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = parent if stem == "config" and parent else stem
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:60] or "config"
    return "_" + name[1:] if name.startswith("-") else name


def shown_path(path: str) -> str:
    """The config's name in a title and a comment: ``Llama-2-7b-hf/config.json``
    (its directory names the checkpoint), else the file's name; a character
    that is not printable (a line break, U+202E) shown as its escape."""
    base = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(path))
    return printable(f"{parent}/{base}" if base == "config.json" and parent else base)


def import_data(data: Any, path: str = "config.json", text: str = "",
                attention: AttentionCount = "exact", experts: ExpertsCount = "model") -> Imported:
    """The declaration of a parsed config (``text``: the file, for positions)."""
    if not isinstance(data, Mapping):
        raise SymflopsError(f"{path}: a config.json must hold a JSON object, found "
                            f"{type(data).__name__}", hint="give the model's config.json")
    model_type = model_type_of(data, path, FAMILIES, text)
    family = FAMILIES[model_type]
    c = Config(path, text, data, model_type)
    check_keys(c, family.read, family.ignored)
    check_common(c, family.lm_classes)
    name = example_name(path)
    d = family.build(c, Options(attention, name, shown_path(path), experts))
    return Imported(d.text(), model_type, name,
                    {n: v.value for n, v in d.dims.items() if v.value is not None}, path,
                    attention, d.longest, experts, d.executed_differs,
                    d.multiple, _context(d.dims.get("S")), d.multiple_alternative,
                    d.structure())


def _context(dim: Any) -> tuple[int, str] | None:
    """The sequence length dim's value and the config key it was read from."""
    if dim is None or dim.value is None or not dim.key:
        return None
    return dim.value, dim.key


def import_config(path: str | os.PathLike[str], attention: AttentionCount = "exact",
                  experts: ExpertsCount = "model") -> Imported:
    """The declaration of the config at ``path``."""
    path = os.fspath(path)
    text, data = read_json(path)
    return import_data(data, path, text, attention, experts)

"""A planner model kept between runs: the second ``symflops plan`` of a config
starts without SymPy.

The planner reads a declaration's derived formulas at a few points (the
sequence length, the micro-batch).  :class:`Compiled` holds those formulas
as plain trees of sums, products, whole powers, maxima, minima, floors and
ceilings of fractions and dims (:data:`Tree`), with the figures that do not
depend on the run, and :func:`model` turns it back into a
:class:`~symflops.planner.records.Model` whose figures are the same formulas
evaluated in exact fractions.  A formula with anything else in it is not
kept (the model is then derived at every run).

The file is kept in the user's cache directory (:func:`cache_dir`), named by
a hash of everything its formulas depend on: the shape of the declaration
(for an imported config, its text without the file's name and the dims'
values: :meth:`symflops.hf.emit.Declaration.structure`), the recompute and
precision policies, symflops's version and the size and time of each of its
modules, so an edit of symflops or a change of shape is a miss.  The dims are
not part of the name: a model is evaluated at the dims of the config that
asks for it, so Llama-2-13B reads the model Llama-2-7B left.  What the cache
cannot answer exactly is never guessed:

- a file that is missing, unreadable, not a regular file, or whose checksum
  or shape is wrong, is a miss and is written anew;
- at a point where a figure is not a whole number of at most
  :data:`~symflops.core.numbers.MAX_RESULT_DIGITS` digits, or where a defined
  dim or an index range fails its check, the model derives its figures with
  the engine (:func:`model`'s ``engine``), which gives the exact figure or the
  error a run without the cache gives.

This module imports neither SymPy nor anything that does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

from .. import __version__
from ..core.errors import SymflopsError, read_text
from ..core.numbers import MAX_RESULT_DIGITS, whole_digits
from ..core.widths import fewest_bytes
from .records import Formula, Model, TokenFlops

#: A formula as plain data: ``("n", numerator, denominator)``, ``("d", dim)``,
#: or an operation on formulas: ``("add", *terms)``, ``("mul", *factors)``,
#: ``("pow", base, whole exponent)``, ``("max", *args)``, ``("min", *args)``,
#: ``("floor", arg)``, ``("ceiling", arg)``.
Tree = tuple
#: The operations a tree holds, and the arity each takes (None: any, at least 1).
OPERATIONS = {"add": None, "mul": None, "max": None, "min": None, "pow": 2, "floor": 1,
              "ceiling": 1}

#: Changed whenever the file's layout changes.
FORMAT = 2
#: The figures of a training token, in TokenFlops's order.
TOKEN_FIGURES = ("model", "executed", "attention", "inference")
#: The largest cache file read back (bytes).
MAX_FILE = 1 << 22
#: The most models kept in the cache directory.
MAX_FILES = 256
SEQ, BATCH = "S", "B"


@dataclass(frozen=True)
class Compiled:
    """What :func:`symflops.planner.model.model_from_layer` computes, without SymPy."""

    name: str                          # the layer's name
    recompute: str
    params_total: Tree                 # the parameter counts, at S = the context
    params_active: Tree
    params_trainable: Tree
    params_read: Tree
    kv_cache_bytes_per_token: Tree | None
    formulas: Mapping[str, tuple[str, str, str]]        # Model.formulas
    token_formulas: Mapping[str, tuple[str, str, str]]  # TokenFlops.formulas
    token: Mapping[str, Tree]          # the four per-token figures
    activations: Tree                  # bytes of one micro-batch's saved activations
    buffers: Tree | None               # buffer elements; None: the layer has none
    definitions: tuple[Tree, ...]      # each defined dim: a positive whole number
    indices: tuple[tuple[Tree, int], ...]  # each index range and the bytes it is counted at


# --- the formulas -----------------------------------------------------------

def evaluate(tree: Tree, values: Mapping[str, Fraction]) -> Fraction | None:
    """``tree`` at ``values``, exactly; None when a dim it holds has no value."""
    kind = tree[0]
    if kind == "n":
        return Fraction(tree[1], tree[2])
    if kind == "d":
        return values.get(tree[1])
    if kind == "pow":
        base = evaluate(tree[1], values)
        return None if base is None else base ** tree[2]
    args = [evaluate(arg, values) for arg in tree[1:]]
    if None in args:
        return None
    if kind == "add":
        return sum(args, Fraction(0))
    if kind == "mul":
        product = Fraction(1)
        for arg in args:
            product *= arg
        return product
    if kind == "floor":
        return Fraction(math.floor(args[0]))
    if kind == "ceiling":
        return Fraction(math.ceil(args[0]))
    return max(args) if kind == "max" else min(args)


def dims_of(tree: Tree) -> set[str]:
    """The dims ``tree`` holds."""
    if tree[0] == "d":
        return {tree[1]}
    if tree[0] == "n":
        return set()
    return set().union(*(dims_of(arg) for arg in tree[1:] if isinstance(arg, tuple)))


def _whole(value: Fraction | None) -> int | None:
    """A whole number that prints exactly (as the engine's ``number`` gives
    it), else None: the caller asks the engine."""
    if value is None or value.denominator != 1:
        return None
    n = value.numerator
    if whole_digits(n) > MAX_RESULT_DIGITS:
        return None
    return n


# --- the model ---------------------------------------------------------------

def model(c: Compiled, dims: Mapping[str, int], file: str, engine: Callable[[], Model]) -> Model:
    """The planner's model of ``c`` at ``dims`` (every dim but the micro-batch,
    as the config gives them), read from ``file``; ``engine()`` derives the
    same model with the engine, asked (once) only where ``c`` cannot answer
    exactly."""
    slow: list[Model] = []

    def derived() -> Model:
        if not slow:
            slow.append(engine())
        return slow[0]

    fixed = {k: Fraction(v) for k, v in dims.items() if k != BATCH}
    if not _same_widths(c, {k: Fraction(v) for k, v in dims.items()}):
        return derived()

    def at(seq: int, batch: int = 1) -> dict[str, Fraction] | None:
        values = {**fixed, SEQ: Fraction(seq), BATCH: Fraction(batch)}
        return values if _checked(c, values) else None

    def figures(trees: tuple[Tree, ...], values: dict[str, Fraction] | None) -> list | None:
        if values is None:
            return None
        try:
            out = [_whole(evaluate(p, values)) for p in trees]
        except ZeroDivisionError:
            return None
        return None if None in out else out

    def flops_per_token(seq: int | None) -> TokenFlops:
        got = figures(tuple(c.token[k] for k in TOKEN_FIGURES), at(seq)) \
            if seq is not None else None
        if got is None:
            return derived().flops_per_token(seq)
        return TokenFlops(*got, formulas={k: Formula(*v) for k, v in c.token_formulas.items()})

    def activation_bytes(micro_batch: int, seq: int) -> int:
        got = figures((c.activations,), at(seq, micro_batch))
        return got[0] if got is not None else derived().activation_bytes(micro_batch, seq)

    def buffers(seq: int | None) -> int | None:
        assert c.buffers is not None
        if seq is None and SEQ in dims_of(c.buffers):
            return None
        got = figures((c.buffers,), {**fixed, SEQ: Fraction(seq or 1), BATCH: Fraction(1)})
        return got[0] if got is not None else derived().buffers(seq)

    # the counts that do not depend on the run, at the config's context
    counts = figures((c.params_total, c.params_active, c.params_trainable, c.params_read,
                      *(() if c.kv_cache_bytes_per_token is None else (c.kv_cache_bytes_per_token,))),
                     at(int(fixed[SEQ]) if SEQ in fixed else 1))
    if counts is None:
        return derived()
    total, active, trainable, read, *cache = counts
    return Model(
        name=f"{c.name} ({os.path.basename(file)})", params_total=total, params_active=active,
        params_trainable=trainable, flops_per_token=flops_per_token,
        activation_bytes=activation_bytes, kv_cache_bytes_per_token=cache[0] if cache else None,
        formulas={k: Formula(*v) for k, v in c.formulas.items()}, counts_attention=True,
        recompute=c.recompute, params_read=read,
        buffers=buffers if c.buffers is not None else None)


def _same_widths(c: Compiled, example: Mapping[str, Fraction]) -> bool:
    """Whether each index tensor takes the bytes ``c`` was kept with at the
    config's own dims (``example``).  The engine gives an index tensor the
    fewest bytes that hold its range at the declaration's examples
    (:func:`symflops.count.indices.index_widths`): token ids over Falcon-7B's
    65,024 words are int32, over a vocabulary of 32,000 int16, so a model
    kept from one config of a shape is another config's only where the
    widths agree."""
    for poly, width in c.indices:
        size = evaluate(poly, example)
        if size is None or size.denominator != 1 or size < 1 \
                or fewest_bytes(size.numerator) != width:
            return False
    return True


def _checked(c: Compiled, values: Mapping[str, Fraction]) -> bool:
    """Whether every defined dim is a positive whole number at ``values`` and
    every index range fits its bytes (the engine's ``check_definitions``);
    False sends the caller to the engine, which says what is wrong."""
    for poly in c.definitions:
        value = evaluate(poly, values)
        if value is not None and (value.denominator != 1 or value <= 0):
            return False
    for poly, width in c.indices:
        size = evaluate(poly, values)
        if size is None:
            continue
        need = None if size.denominator != 1 else fewest_bytes(size.numerator)
        if need is None or need > width:
            return False
    return True


# --- the file ----------------------------------------------------------------

def cache_dir() -> str | None:
    """``$SYMFLOPS_CACHE_DIR`` (empty: no cache), else ``$XDG_CACHE_HOME/symflops``,
    else ``~/.cache/symflops``."""
    given = os.environ.get("SYMFLOPS_CACHE_DIR")
    if given is not None:
        return given or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "symflops")


def _code() -> list[tuple[str, int, int]]:
    """Each module of symflops with its size and time: an edit is a new key."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for folder, dirs, files in os.walk(package):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                out.append((os.path.relpath(os.path.join(folder, name), package), st.st_size,
                            st.st_mtime_ns))
    return out


def key(*parts: Any) -> str:
    """The file name of a model that depends on ``parts`` (JSON-able)."""
    blob = json.dumps([FORMAT, __version__, _code(), *parts], sort_keys=True, default=str)
    return "plan-" + hashlib.sha256(blob.encode()).hexdigest()[:40] + ".json"


def load(name: str) -> Compiled | None:
    """The model kept under ``name``, None on any miss."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        path = os.path.join(folder, name)
        text = read_text(path, "", limit=MAX_FILE)
        kept = json.loads(text)
        body = kept["body"]
        if kept["sha256"] != _digest(body) or kept["format"] != FORMAT:
            return None
        model = from_json(body)
    except (SymflopsError, ValueError, KeyError, TypeError, AttributeError):
        return None
    try:
        os.utime(path)      # used now: pruned last
    except OSError:
        pass
    return model


def store(name: str, c: Compiled) -> None:
    """Keep ``c`` under ``name``, atomically; a cache that cannot be written
    is skipped without a word (it only saves time)."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        body = to_json(c)
        text = json.dumps({"format": FORMAT, "sha256": _digest(body), "body": body})
    except ValueError:  # an integer too long for JSON's text: not kept
        return
    scratch = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(scratch, "x", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(scratch, os.path.join(folder, name))
    except OSError:
        try:
            os.unlink(scratch)
        except OSError:
            pass
        return
    _prune(folder)


def _prune(folder: str) -> None:
    """At most :data:`MAX_FILES` models kept: the ones used longest ago go."""
    try:
        kept = [e for e in os.scandir(folder)
                if e.name.startswith("plan-") and e.name.endswith(".json")]
        if len(kept) <= MAX_FILES:
            return
        kept.sort(key=lambda e: e.stat().st_mtime_ns)
        for e in kept[:len(kept) - MAX_FILES]:
            os.unlink(e.path)
    except OSError:
        pass


def to_json(c: Compiled) -> dict[str, Any]:
    """``c`` as JSON-able data."""
    return dataclasses.asdict(c)


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _tree(data: Any, depth: int = 0) -> Tree:
    """A tree read back from JSON, its shape checked (a TypeError otherwise)."""
    if not isinstance(data, list) or not data or depth > 200:
        raise TypeError("not a formula")
    kind, *args = data
    if kind == "n" and len(args) == 2 and all(type(a) is int for a in args) and args[1] > 0:
        return ("n", args[0], args[1])
    if kind == "d" and len(args) == 1 and isinstance(args[0], str):
        return ("d", args[0])
    if kind == "pow" and len(args) == 2 and type(args[1]) is int:
        return ("pow", _tree(args[0], depth + 1), args[1])
    arity = OPERATIONS.get(kind, 0)
    if kind in OPERATIONS and kind != "pow" and args and (arity is None or len(args) == arity):
        return (kind, *(_tree(a, depth + 1) for a in args))
    raise TypeError("not a formula")


def _width(value: Any) -> int:
    if type(value) is not int or value <= 0:
        raise TypeError("a width is not a positive whole number")
    return value


def _formulas(data: Any) -> dict[str, tuple[str, str, str]]:
    return {str(k): tuple(str(x) for x in v) for k, v in data.items()}


def from_json(b: Mapping[str, Any]) -> Compiled:
    """A model read back from :func:`to_json`'s data, its shape checked (a
    TypeError, KeyError or ValueError otherwise)."""
    token = {k: _tree(b["token"][k]) for k in TOKEN_FIGURES}
    return Compiled(
        name=str(b["name"]), recompute=str(b["recompute"]),
        params_total=_tree(b["params_total"]), params_active=_tree(b["params_active"]),
        params_trainable=_tree(b["params_trainable"]), params_read=_tree(b["params_read"]),
        kv_cache_bytes_per_token=None if b["kv_cache_bytes_per_token"] is None
        else _tree(b["kv_cache_bytes_per_token"]),
        formulas=_formulas(b["formulas"]), token_formulas=_formulas(b["token_formulas"]),
        token=token, activations=_tree(b["activations"]),
        buffers=None if b["buffers"] is None else _tree(b["buffers"]),
        definitions=tuple(_tree(p) for p in b["definitions"]),
        indices=tuple((_tree(p), _width(w)) for p, w in b["indices"]))

"""Planner models prepared with symflops: the first ``symflops plan
--hf-config`` of a config of a known shape starts without SymPy.

:mod:`symflops.planner.compiled` keeps a model in the user's cache once it
has been derived.  This module reads the models shipped in the package
(``prepared_models/``, written by ``python tools/prepare_models.py`` from the
published configs the tests carry), so that even the first run after an
install finds one.  Each is filed under the shape of its declaration
(:meth:`symflops.hf.emit.Declaration.structure`: the text without the config's
file name and values), so Llama-2-13B reads the model prepared from
Llama-2-7B and evaluates it at its own dims.

A prepared model is read only where it is what the engine would derive now.
Its index records the SHA-256 of each module of symflops that the preparing
derivation ran, and of the version file of each library it imported (SymPy,
FLINT, mpmath, PyYAML).  When any of them differs from what is installed (an
edited checkout, another SymPy), no prepared model is read and the plan is
derived as it would be without them.  An empty ``SYMFLOPS_CACHE_DIR``
turns this off with the cache.

This module imports neither SymPy nor anything that does.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from typing import Any, Iterable, Mapping

from .. import __version__
from ..core.errors import SymflopsError, read_text
from . import compiled
from .compiled import Compiled

#: The folder of prepared models, beside this module: one file each, named by
#: :func:`name`, and the index of what prepared them.
PREPARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prepared_models")
INDEX = "index.json"
#: The largest file read (bytes).
MAX_FILE = 1 << 22
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def name(parts: Iterable[Any]) -> str:
    """The name a model that depends on ``parts`` (JSON-able) is filed under."""
    blob = json.dumps([compiled.FORMAT, __version__, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def module_digests(modules: Iterable[str]) -> dict[str, str | None]:
    """Each module of symflops (a path relative to the package) and its SHA-256."""
    return {m: _digest(os.path.join(PACKAGE, m)) for m in sorted(modules)}


def library_digests(libraries: Iterable[str]) -> dict[str, str | None]:
    """Each library (a top-level package name) and the SHA-256 of the file that
    carries its version (``release.py`` where it has one, as SymPy does, else
    its ``__init__.py``), found without importing it."""
    out: dict[str, str | None] = {}
    for lib in sorted(libraries):
        try:
            spec = importlib.util.find_spec(lib)
        except (ImportError, ValueError):
            spec = None
        folder = None if spec is None or spec.origin is None else os.path.dirname(spec.origin)
        release = None if folder is None else os.path.join(folder, "release.py")
        out[lib] = None if release is None else \
            _digest(release) if os.path.isfile(release) else _digest(spec.origin)
    return out


@functools.lru_cache(maxsize=1)
def _current(folder: str) -> bool:
    """Whether the models in ``folder`` were prepared by this code with these
    libraries (False too when its index is missing or damaged)."""
    try:
        index = json.loads(read_text(os.path.join(folder, INDEX), "", limit=MAX_FILE))
        return (index["format"] == compiled.FORMAT and index["version"] == __version__
                and index["modules"] == module_digests(index["modules"])
                and index["libraries"] == library_digests(index["libraries"]))
    except (SymflopsError, ValueError, KeyError, TypeError, AttributeError):
        return False


def lookup(parts: Iterable[Any]) -> Compiled | None:
    """The prepared model filed under ``parts``, None when there is none to read."""
    if compiled.cache_dir() is None or not _current(PREPARED):
        return None
    path = os.path.join(PREPARED, name(parts) + ".json")
    if not os.path.isfile(path):
        return None
    try:
        return compiled.from_json(json.loads(read_text(path, "", limit=MAX_FILE)))
    except (SymflopsError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(folder: str, models: Mapping[str, Compiled], modules: Iterable[str],
          libraries: Iterable[str]) -> None:
    """Write ``models`` (by :func:`name`) into ``folder``, one file each, with
    an index of the digests of the ``modules`` of symflops and the
    ``libraries`` that derived them; the models written before are removed."""
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):
        if old.endswith(".json"):
            os.unlink(os.path.join(folder, old))
    for key in sorted(models):
        _write(os.path.join(folder, key + ".json"), compiled.to_json(models[key]), None)
    _write(os.path.join(folder, INDEX),
           {"format": compiled.FORMAT, "version": __version__,
            "modules": module_digests(modules), "libraries": library_digests(libraries)}, 0)


def _write(path: str, data: Any, indent: int | None) -> None:
    """``data`` as JSON (a line each of the index's entries: ``indent`` 0)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, sort_keys=True, indent=indent) + "\n")

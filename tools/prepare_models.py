"""Write ``symflops/planner/prepared_models/``: the planner's models of the
published configs the tests carry, so that the first ``symflops plan
--hf-config`` of a config of one of their shapes starts without SymPy
(:mod:`symflops.planner.prepared`).

    python tools/prepare_models.py

Run it after a change to symflops's code (``tests/test_plan_prepared.py``
names the modules that changed since the file was written) and commit the
folder.  Each config is imported at the defaults of ``symflops plan``
(``--attention exact``, ``--experts model``, and ``executed`` too where
transformers runs the experts otherwise, ``--recompute none``, the default
precision) and derived by the engine, exactly as a plan without the file
derives it.  The configs are read in a separate process, so that the
libraries recorded are those the derivation imported, not the tests'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Prints every config dict the tests hold (module-level, upper-case names,
#: with a model_type), by name.
READ_CONFIGS = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]).parent)]
configs = {}
for test in sorted(Path(sys.argv[1]).glob("test_hf_*.py")):
    module = __import__(test.stem)
    for key, value in vars(module).items():
        if key.isupper() and isinstance(value, dict) and "model_type" in value:
            configs.setdefault(key, value)
print(json.dumps(configs))
"""


def configs() -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-c", READ_CONFIGS, str(ROOT / "tests")], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def prepare(paths: dict[str, str]) -> tuple[dict, dict[str, list[str]]]:
    """The planner's model of each config (a name and its ``config.json``) by
    :func:`symflops.planner.prepared.name`, and the configs filed under each
    name; a config refused by ``import-hf`` (as some tests' are) is left out."""
    from symflops.core.errors import SymflopsError
    from symflops.count.precision import DEFAULT_POLICY, POLICIES
    from symflops.hf.importer import import_config
    from symflops.planner import prepared
    from symflops.planner.model import compile_import
    from symflops.planner.plan import import_parts

    precision = POLICIES[DEFAULT_POLICY]
    models = {}
    kinds: dict[str, list[str]] = {}
    for key, path in sorted(paths.items()):
        try:
            first = import_config(path)
        except SymflopsError as exc:
            print(f"  {key}: refused, not prepared ({exc.message[:80]})")
            continue
        both = [first] + ([import_config(path, experts="executed")]
                          if first.executed_differs else [])
        for imported in both:
            parts = import_parts(imported, "none", precision)
            name = prepared.name(parts)
            kinds.setdefault(name, []).append(key)
            if name in models:
                continue
            _, plain = compile_import(imported, "none", precision)
            if plain is None:
                print(f"  {key}: a formula the cache cannot hold; not prepared")
                continue
            models[name] = plain
    return models, kinds


def loaded() -> tuple[list[str], list[str]]:
    """The modules of symflops this process has imported (paths relative to
    the package) and the libraries (top-level packages installed beside it)."""
    from symflops.planner import prepared

    package = Path(prepared.PACKAGE)
    modules = sorted(os.path.relpath(m.__file__, package) for n, m in list(sys.modules.items())
                     if n.split(".")[0] == "symflops" and getattr(m, "__file__", None))
    libraries = sorted({n.split(".")[0] for n, m in list(sys.modules.items())
                        if not n.startswith("_") and "-packages" in str(getattr(m, "__file__", ""))
                        and n.split(".")[0] != "symflops"})
    return modules, libraries


def main() -> int:
    from symflops.planner import prepared

    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for key, config in configs().items():
            paths[key] = os.path.join(tmp, key, "config.json")
            os.makedirs(os.path.dirname(paths[key]))
            with open(paths[key], "w", encoding="utf-8") as fh:
                json.dump(config, fh)
        models, kinds = prepare(paths)
    modules, libraries = loaded()
    prepared.write(prepared.PREPARED, models, modules, libraries)
    print(f"{len(models)} models of {sum(len(v) for v in kinds.values())} configs written to "
          f"{os.path.relpath(prepared.PREPARED, ROOT)}; {len(modules)} modules of symflops, "
          f"libraries {', '.join(libraries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

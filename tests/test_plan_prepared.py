"""The planner's models prepared in the package (symflops.planner.prepared).

The oracle of every figure is the engine run without any cache: a plan read
from a prepared model must print the same bytes.  Llama-2-13B, whose config
no test carries, is planned from the model prepared for Llama-2-7B (the same
shape at other sizes); its parameter count is also derived by hand below.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from symflops.cli import main
from symflops.planner import prepared
from test_hf_deepseek import DEEPSEEK_V3
from test_hf_import import GPT2_SMALL, LLAMA2_7B

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import prepare_models  # noqa: E402

# Llama-2-13B's published config: Llama-2-7B's shape, wider and deeper
LLAMA2_13B = {**LLAMA2_7B, "hidden_size": 5120, "intermediate_size": 13824,
              "num_attention_heads": 40, "num_key_value_heads": 40, "num_hidden_layers": 40}
# its parameters by hand: embedding and head V x D each; per layer four D x D
# attention matrices, three D x F MLP matrices and two norms of D; the final norm
V, D, F, L = 32000, 5120, 13824, 40
LLAMA2_13B_PARAMS = 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D
assert LLAMA2_13B_PARAMS == 13_015_864_320   # the model card's figure

RUNS = (
    ["--tokens", "2e12"],
    ["--tokens", "1e12", "--seq", "1024", "--json"],
    ["--seq", "512", "--micro-batch", "2", "--accelerator", "h100", "--accelerators", "64",
     "--mfu", "0.4", "--zero", "3", "--decode-batch", "4", "--context", "1024"],
)


def _engine(path: str, args: list[str], monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", "")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--hf-config", path, *args])
    return code, out.getvalue(), err.getvalue()


def _write(folder: Path, name: str, config: dict) -> str:
    (folder / name).mkdir(parents=True)
    path = folder / name / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Models prepared, as tools/prepare_models.py prepares them, from Llama-2-7B,
    DeepSeek-V3 and GPT-2 into a folder of the test's own."""
    tmp = tmp_path_factory.mktemp("prepared")
    paths = {n: _write(tmp / "configs", n, c)
             for n, c in (("llama", LLAMA2_7B), ("deepseek", DEEPSEEK_V3), ("gpt2", GPT2_SMALL))}
    models, kinds = prepare_models.prepare(paths)
    assert sorted(k for v in kinds.values() for k in v) == sorted(paths) and len(models) == 3
    modules, _ = prepare_models.loaded()
    prepared.write(str(tmp / "models"), models, modules, ["sympy", "yaml"])
    return tmp / "models"


def test_a_first_plan_reads_a_prepared_model_without_sympy(folder, tmp_path, monkeypatch):
    """Llama-2-13B (a shape prepared from Llama-2-7B) and DeepSeek-V3, each in a
    fresh interpreter with an empty cache: the bytes the engine prints, and
    SymPy never imported."""
    configs = {"llama2_13b": _write(tmp_path, "Llama-2-13b-hf", LLAMA2_13B),
               "deepseek_v3": _write(tmp_path, "DeepSeek-V3", DEEPSEEK_V3)}
    env = {**os.environ, "SYMFLOPS_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for name, path in configs.items():
        for args in RUNS:
            code = (f"import sys; import symflops.planner.prepared as p; p.PREPARED = "
                    f"{str(folder)!r}; from symflops.cli import main; "
                    f"code = main(['plan', '--hf-config', {path!r}, *{args!r}]); "
                    "print('sympy' in sys.modules, code, file=sys.stderr)")
            run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True)
            want_code, want_out, want_err = _engine(path, args, monkeypatch)
            assert (run.stdout, run.stderr) == (want_out, want_err + f"False {want_code}\n"), \
                (name, args)
            assert not (tmp_path / "cache").exists()   # read, not derived and kept
    total = json.loads(_engine(configs["llama2_13b"], RUNS[1], monkeypatch)[1])["params"]["total"]
    assert total == LLAMA2_13B_PARAMS


def test_an_edit_another_library_or_damage_reads_no_prepared_model(folder, tmp_path,
                                                                    monkeypatch):
    """A prepared model is read only while every module and library its index
    names is the one that prepared it; a damaged file is no model."""
    import shutil

    from symflops.count.precision import DEFAULT_POLICY, POLICIES
    from symflops.hf.importer import import_config
    from symflops.planner.plan import import_parts

    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "models"
    shutil.copytree(folder, copy)
    monkeypatch.setattr(prepared, "PREPARED", str(copy))
    parts = import_parts(import_config(_write(tmp_path, "gpt2", GPT2_SMALL)), "none",
                         POLICIES[DEFAULT_POLICY])
    index = json.loads((copy / prepared.INDEX).read_text())

    def read(**change) -> bool:
        (copy / prepared.INDEX).write_text(json.dumps({**index, **change}))
        prepared._current.cache_clear()
        return prepared.lookup(parts) is not None

    assert read()
    first = sorted(index["modules"])[0]
    assert not read(modules={**index["modules"], first: "0" * 64})        # an edited module
    assert not read(libraries={**index["libraries"], "sympy": "0" * 64})  # another SymPy
    assert not read(version="0.0.0")
    assert read()
    model = copy / (prepared.name(parts) + ".json")
    model.write_text(model.read_text()[:-20])
    assert not read()
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", "")   # no cache: nothing prepared read either
    shutil.copy(folder / model.name, model)
    assert not read()


def test_the_shipped_models_were_prepared_by_this_code():
    """``symflops/planner/prepared_models/`` is what tools/prepare_models.py writes
    from this code; after an edit of a module it names, run it again."""
    index = json.loads((Path(prepared.PREPARED) / prepared.INDEX).read_text())
    now = prepared.module_digests(index["modules"])
    changed = [m for m in index["modules"] if now[m] != index["modules"][m]]
    assert not changed, ("the prepared planner models are stale: run 'python "
                         "tools/prepare_models.py' and commit symflops/planner/prepared_models/ "
                         f"(changed since: {', '.join(changed)})")
    names = {p.name for p in Path(prepared.PREPARED).glob("*.json")} - {prepared.INDEX}
    assert len(names) >= 60


def test_a_shipped_model_is_what_the_engine_derives_now(tmp_path):
    """GPT-2's shipped model, prepared again here: the same data."""
    index = json.loads((Path(prepared.PREPARED) / prepared.INDEX).read_text())
    if index["libraries"] != prepared.library_digests(index["libraries"]):
        pytest.skip("the shipped models were prepared with other versions of "
                    f"{', '.join(index['libraries'])}; they are not read here")
    models, _ = prepare_models.prepare({"gpt2": _write(tmp_path, "gpt2", GPT2_SMALL)})
    (name, model), = models.items()
    shipped = json.loads((Path(prepared.PREPARED) / f"{name}.json").read_text())
    assert json.loads(json.dumps(prepared.compiled.to_json(model))) == shipped

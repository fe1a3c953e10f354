"""The cache of compiled planner models (symflops.planner.compiled).

The oracle of every figure here is the engine itself run without the cache:
``plan --hf-config`` must print the same bytes, and exit the same way, from a
kept model as from a fresh derivation, for models of every kind the planner
reads (dense, MLA with experts, chunked attention whose experts transformers
runs otherwise, a Mamba hybrid, learned positions).  The polynomial core is
checked against SymPy's own substitution and against hand counts.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import random
import stat
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy

from symflops.cli import main
from symflops.core.ir import dim_symbol
from symflops.planner import compiled, prepared
from symflops.planner import model as planner_model
from test_hf_deepseek import DEEPSEEK_V3
from test_hf_hybrids import JAMBA_V01
from test_hf_import import GPT2_SMALL, LLAMA2_7B
from test_hf_llama4 import SCOUT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {"llama2_7b": LLAMA2_7B, "deepseek_v3": DEEPSEEK_V3, "llama4_scout": SCOUT,
           "jamba": JAMBA_V01, "gpt2": GPT2_SMALL}

#: Runs that read every figure of the model: per-token FLOPs at the config's
#: context and at a given length, activations at a micro-batch, memory under
#: ZeRO, decoding (KV cache, weights read), the JSON, and refusals.
RUNS = (
    ["--tokens", "2e12"],
    ["--tokens", "1e12", "--seq", "1024", "--json"],
    ["--seq", "512", "--micro-batch", "2", "--accelerator", "h100", "--accelerators", "64",
     "--mfu", "0.4", "--zero", "3", "--decode-batch", "4", "--context", "1024"],
    ["--seq", "1000", "--tokens", "1e9"],   # not a multiple of Scout's attention chunk
    ["--seq", "4096", "--tokens", "1e9", "--json"],  # longer than GPT-2's 1,024 positions
)


#: Run in a fresh interpreter before ``main``: no prepared model is read
#: (they have their own tests, tests/test_plan_prepared.py).
NO_PREPARED = "import symflops.planner.prepared as p; p.PREPARED = '/nonexistent'; "


@pytest.fixture(autouse=True)
def no_prepared_models(monkeypatch, tmp_path):
    """The user's cache alone: the models prepared in the package are not read."""
    monkeypatch.setattr(prepared, "PREPARED", str(tmp_path / "no-prepared-models"))


def _plan(path: str, args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--hf-config", path, *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture()
def configs(tmp_path):
    paths = {}
    for name, config in CONFIGS.items():
        (tmp_path / name).mkdir()
        paths[name] = str(tmp_path / name / "config.json")
        with open(paths[name], "w") as fh:
            json.dump(config, fh)
    return paths


def test_a_kept_model_prints_what_the_engine_derives(configs, tmp_path, monkeypatch):
    """Each run's output and exit status, from the engine (cache off) and from
    the kept model, byte for byte; the kept runs never call the engine."""
    engine = planner_model.model_from_import
    memo = functools.lru_cache(maxsize=None)(
        lambda text, file, recompute, precision, imported: engine(imported, recompute, precision))
    monkeypatch.setattr(planner_model, "model_from_import", lambda imported, recompute, precision:
                        memo(imported.text, imported.file, recompute, precision, imported))
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", "")
    expected = {(n, i): _plan(p, a) for n, p in configs.items() for i, a in enumerate(RUNS)}
    assert {code for code, _, _ in expected.values()} == {0, 2}  # refusals are compared too

    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(cache))
    for name, path in configs.items():
        assert _plan(path, RUNS[0]) == expected[name, 0]   # a miss: derived, then kept
    assert len(list(cache.iterdir())) == len(CONFIGS) + 1  # Scout's "executed" twin too

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was asked for a kept model")

    monkeypatch.setattr(planner_model, "_parts", no_engine)
    for (name, i), want in expected.items():
        assert _plan(configs[name], RUNS[i]) == want, (name, RUNS[i])


def test_another_recompute_is_another_file_another_size_the_same(configs, tmp_path,
                                                                monkeypatch):
    """A model is kept by the shape of its declaration: a config that only
    changes a size reads the same file, at its own dims; another recompute
    policy, or another shape, is another file."""
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(tmp_path / "cache"))
    path = configs["llama2_7b"]
    before = json.loads(_plan(path, ["--seq", "2048", "--json"])[1])
    _plan(path, ["--seq", "2048", "--recompute", "full"])
    assert len(os.listdir(tmp_path / "cache")) == 2
    with open(path, "w") as fh:
        json.dump({**LLAMA2_7B, "intermediate_size": 11008 + 256}, fh)
    after = json.loads(_plan(path, ["--seq", "2048", "--json"])[1])
    assert len(os.listdir(tmp_path / "cache")) == 2
    # three D x F matrices per layer (gate, up, down): 3 x 4096 x 256 x 32 layers more
    assert after["params"]["total"] - before["params"]["total"] == 3 * 4096 * 256 * 32
    with open(path, "w") as fh:   # grouped key/value heads: another shape
        json.dump({**LLAMA2_7B, "num_key_value_heads": 8}, fh)
    _plan(path, ["--seq", "2048", "--json"])
    assert len(os.listdir(tmp_path / "cache")) == 3


def test_token_ids_of_other_bytes_are_derived_not_read_from_a_kept_model(configs, tmp_path,
                                                                          monkeypatch):
    """An index tensor takes the fewest bytes that hold its range at the
    config's values: token ids over 65,024 words are int32, over Llama-2's
    32,000 int16.  Llama-2-7B after the same shape with 65,024 words (one
    cache file) prints what the engine prints for it, int16 ids and all."""
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(tmp_path / "cache"))
    path = configs["llama2_7b"]
    args = ["--seq", "2048", "--micro-batch", "2", "--json"]
    with open(path, "w") as fh:
        json.dump({**LLAMA2_7B, "vocab_size": 65024}, fh)
    assert _plan(path, args)[0] == 0
    with open(path, "w") as fh:
        json.dump(LLAMA2_7B, fh)
    narrow = _plan(path, args)
    assert len(os.listdir(tmp_path / "cache")) == 1
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", "")
    assert narrow == _plan(path, args)


def test_a_damaged_file_is_a_miss_and_is_written_anew(configs, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(cache))
    path = configs["llama2_7b"]
    want = _plan(path, ["--seq", "2048"])
    (kept,) = cache.iterdir()
    good = kept.read_text()
    body = json.loads(good)
    body["body"]["params_total"] = ["n", 1, 1]   # a figure changed without its checksum
    for damage in ("{not json", "", json.dumps(body), json.dumps({**body, "format": 0}),
                   good[: len(good) // 2]):
        kept.write_text(damage)
        assert _plan(path, ["--seq", "2048"]) == want
        assert kept.read_text() == good


def test_a_fifo_or_a_directory_in_the_cache_neither_blocks_nor_fails(configs, tmp_path,
                                                                     monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(cache))
    path = configs["gpt2"]
    want = _plan(path, ["--seq", "512"])
    (kept,) = cache.iterdir()
    kept.unlink()
    os.mkfifo(kept)                        # read without blocking: a miss
    assert _plan(path, ["--seq", "512"]) == want
    assert stat.S_ISREG(kept.stat().st_mode)
    kept.unlink()
    kept.mkdir()                           # cannot be replaced: not kept, still planned
    assert _plan(path, ["--seq", "512"]) == want
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(blocked / "cache"))  # cannot be made
    assert _plan(path, ["--seq", "512"]) == want


def test_many_devices_are_planned_from_the_engine(configs, tmp_path, monkeypatch):
    """A plan over devices needs the derived layer: it never reads a kept model."""
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(tmp_path / "cache"))
    args = ["--seq", "2048", "--tp", "2", "--pp", "2", "--accelerators", "8"]
    want = _plan(configs["llama2_7b"], args)
    assert want[0] == 0
    assert not (tmp_path / "cache").exists()


def test_a_kept_model_is_planned_without_sympy(configs, tmp_path):
    env = {**os.environ, "SYMFLOPS_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    code = (NO_PREPARED + "import sys; from symflops.cli import main; "
            f"main(['plan', '--hf-config', {configs['deepseek_v3']!r}, '--tokens', '2e12']); "
            "print('sympy' in sys.modules, file=sys.stderr)")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True) for _ in range(2)]
    assert [r.stderr for r in runs] == ["True\n", "False\n"]
    assert runs[0].stdout == runs[1].stdout != ""


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("SYMFLOPS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiled.cache_dir() == os.path.join(str(tmp_path), "symflops")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compiled.cache_dir() == os.path.join(str(tmp_path), "home", ".cache", "symflops")
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", "")
    assert compiled.cache_dir() is None


# --- the polynomial core --------------------------------------------------------

def test_plain_formulas_evaluate_as_sympy_substitutes():
    """Random sums of products of dims to powers from -2 to 3, with fraction
    coefficients, maxima, minima, floors and ceilings: the plain tree at random
    positive points equals SymPy's exact substitution into the expression."""
    rng = random.Random(7)
    names = ["B", "S", "D", "H", "N_k"]
    syms = [dim_symbol(n) for n in names]

    def term():
        return sympy.Rational(rng.randint(-9, 9), rng.randint(1, 6)) * sympy.Mul(
            *[s ** rng.randint(-2, 3) for s in syms if rng.random() < .5])

    wraps = (lambda e: e, sympy.factor, lambda e: sympy.Max(e, term()),
             lambda e: sympy.Min(e, term()) * syms[0], sympy.floor, sympy.ceiling)
    for _ in range(80):
        expr = rng.choice(wraps)(sum(term() for _ in range(rng.randint(1, 5))))
        tree = planner_model.plain(expr)
        assert tree is not None, expr
        values = {n: rng.randint(1, 10**6) for n in names}
        want = expr.subs({dim_symbol(n): v for n, v in values.items()})
        assert compiled.evaluate(tree, {n: Fraction(v) for n, v in values.items()}) == \
            Fraction(int(want.p), int(want.q))


def test_what_is_not_plain_is_not_kept():
    d = dim_symbol("D")
    for expr in (sympy.sqrt(d), 2 ** d, sympy.log(d), sympy.Float(1.5) * d,
                 sympy.Symbol("D") * d, sympy.Piecewise((d, d > 3), (1, True))):
        assert planner_model.plain(expr) is None


def test_hand_counts_of_the_plain_terms():
    # 12 B D F + max(D, F)/2 at B = 2, D = 4, F = 16: 12 x 2 x 4 x 16 + 8 = 1544
    tree = ("add", ("mul", ("n", 12, 1), ("d", "B"), ("d", "D"), ("d", "F")),
            ("mul", ("n", 1, 2), ("max", ("d", "D"), ("d", "F"))))
    assert compiled.evaluate(tree, {"B": Fraction(2), "D": Fraction(4), "F": Fraction(16)}) == 1544
    assert compiled.evaluate(tree, {"B": Fraction(2), "D": Fraction(4)}) is None
    # N / G with N = 12, G = 8 is 3/2: not a whole number, the engine is asked
    ratio = ("mul", ("d", "N"), ("pow", ("d", "G"), -1))
    assert compiled.evaluate(ratio, {"N": Fraction(12), "G": Fraction(8)}) == Fraction(3, 2)
    assert compiled._whole(Fraction(3, 2)) is None


def test_the_models_used_longest_ago_are_pruned(configs, tmp_path, monkeypatch):
    """At most MAX_FILES models are kept (here 2): storing a third removes the
    one used longest ago, where a kept model read again counts as used."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMFLOPS_CACHE_DIR", str(cache))
    monkeypatch.setattr(compiled, "MAX_FILES", 2)
    path = configs["gpt2"]

    def files():
        return set(os.listdir(cache))

    _plan(path, ["--seq", "512", "--recompute", "none"])
    (a,) = files()
    _plan(path, ["--seq", "512", "--recompute", "full"])
    (b,) = files() - {a}
    _plan(path, ["--seq", "512", "--recompute", "none"])      # a read again: used now
    _plan(path, ["--seq", "512", "--recompute", "selective"])
    assert len(files()) == 2 and a in files() and b not in files()

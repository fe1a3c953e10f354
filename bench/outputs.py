"""Every output of the shipped declarations and of the test configs, written to
a directory so that two versions of symflops can be diffed byte for byte:
``python bench/outputs.py OUT [--jobs N]``, then ``diff -r OUT_BEFORE OUT_AFTER``.

For each ``derivations/*.yaml``: ``derive`` (text and ``--json``), ``eval``
at each of its examples (text and ``--json``), ``render --format md`` and
``--format tex``.  For each Hugging Face config written in
``tests/test_hf_*.py`` (module-level dicts with a ``model_type``):
``import-hf`` under both attentions and ``plan --hf-config`` (text and
``--json``; with ``--seq 4096`` and without).  Each file holds the standard
output, then the standard error and the exit status, of one command run
in-process through :func:`symflops.cli.main`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def run(argv: list[str]) -> str:
    from symflops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    return f"{out.getvalue()}\n--- stderr\n{err.getvalue()}\n--- exit {code}\n"


def declaration_jobs(path: Path) -> list[tuple[str, list[str]]]:
    from symflops.declaration.reader import load

    stem, p = path.stem, str(path)
    jobs = [(f"{stem}.derive.txt", ["derive", p]), (f"{stem}.derive.json", ["derive", p, "--json"]),
            (f"{stem}.md", ["render", p, "--format", "md"]),
            (f"{stem}.tex", ["render", p, "--format", "tex"])]
    for k, example in enumerate(load(path).examples):
        name = example.name
        jobs.append((f"{stem}.eval{k}.txt", ["eval", p, "--example", name]))
        jobs.append((f"{stem}.eval{k}.json", ["eval", p, "--example", name, "--json"]))
    return jobs


def configs() -> dict[str, dict]:
    found = {}
    for test in sorted((ROOT / "tests").glob("test_hf_*.py")):
        module = importlib.import_module(test.stem)
        for name, value in vars(module).items():
            if isinstance(value, dict) and "model_type" in value and name.isupper():
                found[f"{test.stem[8:]}.{name}"] = value
    return found


def config_jobs(name: str, path: str) -> list[tuple[str, list[str]]]:
    jobs = []
    for attention in ("exact", "full-square"):
        jobs.append((f"{name}.{attention}.yaml", ["import-hf", path, "--attention", attention]))
    for seq in (["--seq", "4096"], []):
        tag = "seq" if seq else "noseq"
        base = ["plan", "--hf-config", path, "--tokens", "2e12", *seq]
        jobs.append((f"{name}.plan.{tag}.txt", base))
        jobs.append((f"{name}.plan.{tag}.json", [*base, "--json"]))
    # one device's share under tensor and pipeline parallelism, from the engine's records
    jobs.append((f"{name}.plan.tp.json", ["plan", "--hf-config", path, "--tokens", "2e12",
                                          "--seq", "2048", "--tp", "2", "--pp", "2", "--json"]))
    return jobs


def write_all(out: Path, jobs: list[tuple[str, list[str]]]) -> None:
    for file, argv in jobs:
        (out / file).write_text(run(argv))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", choices=("declarations", "configs"),
                        help="only the shipped declarations' outputs, or only the configs'")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = [declaration_jobs(p) for p in sorted((ROOT / "derivations").glob("*.yaml"))
            if args.only != "configs"]
    tmp = Path(tempfile.mkdtemp(prefix="symflops-outputs-"))
    for name, config in configs().items() if args.only != "declarations" else ():
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(config))
        work.append(config_jobs(name, str(path)))
    with ProcessPoolExecutor(args.jobs) as pool:
        list(pool.map(write_all, [out] * len(work), work))
    for f in out.iterdir():  # the temporary directory's name differs from run to run
        text = f.read_text()
        if str(tmp) in text:
            f.write_text(text.replace(str(tmp), "CONFIGS"))
    print(f"{sum(map(len, work))} outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

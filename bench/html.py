"""The HTML sheets' cost: ``python bench/html.py [NAME ...] [--all]``.

For each declaration (default ffn, llama and moe; ``--all``: every file of
``derivations/``), ``symflops render --format md`` and ``--format html`` each
run in a fresh interpreter: the wall and CPU time (user + system) of each,
the extra of the HTML page over the Markdown sheet, the peak resident memory
of the HTML run (the child's own, from ``os.wait4``), and the page's weight:
in all, its MathML, its inline SVG, its script and data, and gzipped (what a
web server sends).  ``--root DIR`` measures another checkout (``git archive
COMMIT | tar -x -C DIR``) for a before and after.  Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], root: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one command run from ``root``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"{' '.join(args)} failed: {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024


def parts(page: str) -> dict[str, int]:
    def size(pattern: str) -> int:
        return sum(len(m.group(0).encode()) for m in re.finditer(pattern, page, re.S))

    raw = page.encode()
    return {"kB": len(raw), "math": size(r"<math\b.*?</math>"), "svg": size(r"<svg\b.*?</svg>"),
            "script": size(r"<script\b.*?</script>"), "gzip": len(gzip.compress(raw, 9))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=["ffn", "llama", "moe"])
    parser.add_argument("--all", action="store_true", help="every shipped declaration")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout to measure (another version: a git archive of it)")
    args = parser.parse_args()
    names = (sorted(p.stem for p in (args.root / "derivations").glob("*.yaml")) if args.all
             else args.names)
    print(f"{'declaration':24} {'md s':>6} {'md cpu':>7} {'html s':>7} {'html cpu':>8} "
          f"{'extra cpu':>9} {'RSS MB':>7} {'page kB':>8} {'math':>6} {'svg':>6} {'script':>7} "
          f"{'gzip':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            src = f"derivations/{name}.yaml"
            base = [sys.executable, "-m", "symflops", "render", src, "-o"]
            md = run(base + [os.path.join(tmp, f"{name}.md"), "--format", "md"], args.root)
            out = os.path.join(tmp, f"{name}.html")
            html = run(base + [out, "--format", "html"], args.root)
            p = parts(Path(out).read_text(encoding="utf-8"))
            k = {key: round(v / 1000) for key, v in p.items()}
            print(f"{name:24} {md[0]:6.1f} {md[1]:7.1f} {html[0]:7.1f} {html[1]:8.1f} "
                  f"{html[1] - md[1]:9.1f} {html[2]:7d} {k['kB']:8d} {k['math']:6d} "
                  f"{k['svg']:6d} {k['script']:7d} {k['gzip']:6d}", flush=True)
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          "CPU time is what the machine's load does not inflate)")


if __name__ == "__main__":
    main()

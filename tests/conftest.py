import compileall
import gc
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The independent oracles some tests need; without them those tests skip
#: (pytest.importorskip), and the run says so in one line.
ORACLES = ("torch", "transformers")
ORACLE_INSTALL = "pip install '.[test,oracle]'"
_MISSING = re.compile(r"could not import '(%s)'" % "|".join(ORACLES))


def oracle_skip_line(reasons):
    """The line that says how many tests were skipped for a missing oracle,
    or None when none was: ``reasons`` are the skip reasons of a run."""
    missing = [m.group(1) for m in map(_MISSING.search, reasons) if m]
    if not missing:
        return None
    names = " and ".join(sorted(set(missing), key=ORACLES.index))
    return (f"{len(missing)} oracle test{'s' if len(missing) > 1 else ''} skipped: {names} not "
            f"installed (install the oracles with {ORACLE_INSTALL})")


def _reason(report):
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def pytest_terminal_summary(terminalreporter):
    line = oracle_skip_line([_reason(r) for r in terminalreporter.stats.get("skipped", [])])
    if line:
        terminalreporter.write_line(line)


# The property tests (hypothesis) draw the same examples at every run, so the
# suite's verdict depends on the code alone, never on the draw of one run (a
# red CI must mean a change broke something).  To look for new counterexamples,
# run them with HYPOTHESIS_PROFILE=explore, which draws afresh each time.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

# The cache of compiled planner models (symflops.planner.compiled) is off in
# every test and every command a test starts: a test sees what the engine
# derives, never a file a developer's earlier run left in ~/.cache.  The
# cache's own tests turn it on with a directory of their own.
os.environ["SYMFLOPS_CACHE_DIR"] = ""


#: Full collections that freeze what survived them, before one that sees every
#: object again (and frees the cycles that died frozen).
THAWED_EVERY = 16
_full_collections = 0


def _freeze_survivors(phase, info):
    """After a full collection, what survived it is moved out of the
    collector's reach (``gc.freeze``).  A test worker lives for the whole run
    and its heap grows to hundreds of MB (SymPy's caches, the engine's,
    matplotlib's); Python collects all of it again each time it has grown by
    a quarter, about 40 times a run at up to a second each: 37 s of the two
    workers' 728 s of CPU in one run (timed with ``gc.callbacks``), 12 s with
    this hook.  A frozen object is still freed when its last reference goes;
    only a cycle that dies frozen waits, until every ``THAWED_EVERY``-th full
    collection, which sees the whole heap again.  Tests only: symflops's own
    processes collect as Python does."""
    global _full_collections
    if phase == "stop" and info["generation"] == 2:
        _full_collections += 1
        if _full_collections % THAWED_EVERY:
            gc.freeze()
        else:
            gc.unfreeze()


gc.callbacks.append(_freeze_survivors)


def pytest_configure(config):
    """Where Python may not write bytecode (PYTHONDONTWRITEBYTECODE, as on
    some CI machines), every process the run starts (the workers, and each
    ``python -m symflops`` a test runs) would compile symflops's modules anew
    from source, about 0.4 s of CPU each.  The controller compiles them once,
    into the ``__pycache__`` folders Python reads them from (ignored by git),
    before any worker starts."""
    if sys.flags.dont_write_bytecode and not hasattr(config, "workerinput"):
        compileall.compile_dir(str(ROOT / "symflops"), quiet=2, workers=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Where Python may not write bytecode, pytest cannot keep the test
    modules it rewrites (for its assertion messages) either, and every worker
    rewrote all of them at every run, about 4 s of CPU each before the first
    test.  While the tests are collected, pytest may write them, beside
    symflops's own, into the ``__pycache__`` folders (ignored by git); the
    flag is restored for the run itself."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        yield
    finally:
        sys.dont_write_bytecode = before

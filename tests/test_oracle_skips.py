"""A run without the oracles (torch, transformers) says in one line how many
tests it skipped for them and how to install them (tests/conftest.py)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

FAKE = '''
import sys
import pytest

sys.modules["torch"] = None  # an import of torch now fails, as when it is not installed
sys.modules["transformers"] = None


def test_torch_one():
    pytest.importorskip("torch")


def test_torch_two():
    pytest.importorskip("torch")


def test_transformers():
    pytest.importorskip("transformers")


def test_other_skip():
    pytest.skip("pdflatex is not installed")


def test_runs():
    pass
'''


def run(tmp_path, source, workers=("-p", "no:xdist")):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_fake.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *workers, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True)
    return done.stdout.splitlines()


# in one process, and as the README's command runs (pytest-xdist's workers report
# their skips to the process that prints the summary)
@pytest.mark.parametrize("workers", [("-p", "no:xdist"), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_run_without_the_oracles_says_how_many_tests_it_skipped_and_how_to_install(tmp_path,
                                                                                     workers):
    lines = run(tmp_path, FAKE, workers)
    said = [l for l in lines if "oracle" in l]
    # 2 for torch + 1 for transformers; the pdflatex skip is no oracle's
    assert said == ["3 oracle tests skipped: torch and transformers not installed "
                    "(install the oracles with pip install '.[test,oracle]')"]
    assert any("1 passed, 4 skipped" in l for l in lines)


def test_no_line_when_no_test_was_skipped_for_an_oracle():
    from conftest import oracle_skip_line

    assert oracle_skip_line([]) is None
    assert oracle_skip_line(["pdflatex is not installed", "no CPU affinity on this system"]) is None
    assert oracle_skip_line(["could not import 'torch': No module named 'torch'"]) == (
        "1 oracle test skipped: torch not installed "
        "(install the oracles with pip install '.[test,oracle]')")

"""What `pip install .` installs: every package of the source tree. The hf
package was once left out of pyproject's list, so an installed symflops
failed every command with ModuleNotFoundError while the tests, run from the
checkout, passed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_installed():
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(symflops(?:\.\w+)*)"', text.split("packages =", 1)[1]
                            .split("]", 1)[0]))
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "symflops").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_the_reference_is_installed_and_found_beside_the_declarations(tmp_path, monkeypatch):
    """build's HTML site takes symflops's own docs/: installed as the package
    symflops.docs (pyproject maps it and its *.md), and found beside the
    installed declarations, whatever the working directory."""
    text = (ROOT / "pyproject.toml").read_text()
    assert '"symflops.docs" = "docs"' in text and '"symflops.docs" = ["*.md"]' in text
    from symflops.commands import layer
    from symflops.planner import model

    package = tmp_path / "site-packages" / "symflops"
    (package / "derivations").mkdir(parents=True)
    (package / "docs").mkdir()
    (package / "docs" / "index.md").write_text("# Reference\n")
    monkeypatch.setattr(model, "declarations_dir", lambda: str(package / "derivations"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# the user's own\n")
    assert layer._reference() == str(package / "docs")

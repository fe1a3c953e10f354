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

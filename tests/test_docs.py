"""The README is a front page and docs/ the reference: every page it names
exists, every place in the code that sends a reader to the documentation
names a page (and a heading) that exists, and the --json table documents the
keys ``derive --json`` prints."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]


def test_the_readme_is_a_front_page_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, len(readme.splitlines())
    assert "pip install . && symflops build" in readme
    assert "pip install '.[test,oracle]' && python -m pytest" in readme


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                                         for p in DOCS.glob("*.md"))])
def test_every_local_link_resolves(page: str) -> None:
    path = ROOT / page
    for target in _links(path):
        assert (path.parent / target).exists(), (page, target)


def test_every_reference_page_is_listed_in_the_readme_and_the_index() -> None:
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    readme = {Path(t).name for t in _links(ROOT / "README.md") if t.startswith("docs/")}
    index = {Path(t).name for t in _links(DOCS / "index.md")}
    assert pages <= readme - {"index.md"}, pages - readme
    assert pages <= index, pages - index


def _strings() -> list[tuple[str, int, str]]:
    """Every string constant of the package, with its file and line."""
    found = []
    for path in (ROOT / "symflops").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((path.relative_to(ROOT).as_posix(), node.lineno, node.value))
    return found


def test_messages_and_help_cite_pages_that_exist() -> None:
    """A hint or --help text that sends the reader to the documentation names a
    docs/ page that exists; none still points at a README section (the
    reference left the README)."""
    cited = 0
    for file, line, text in _strings():
        for page in re.findall(r"docs/([\w-]+\.md)", text):
            cited += 1
            assert (DOCS / page).is_file(), (file, line, page)
        assert not re.search(r"\bthe README\b|README's|README \(", text), (file, line, text)
    assert cited >= 3  # evaluate.py, hf/config.py, declaration/reader.py at least


def test_the_json_table_documents_every_key_derive_json_prints() -> None:
    """docs/json.md's table against the keys ``derive --json`` prints for a
    whole model (llama has every optional part)."""
    from symflops import costs, derive, load
    from symflops.count.summary import summary

    d = derive(load(ROOT / "derivations" / "llama.yaml"))
    printed = list(summary(d, costs(d)).to_json())
    table = (DOCS / "json.md").read_text().split("| key | value |", 1)[1].split("\n\n", 1)[0]
    documented = []
    for row in table.splitlines()[2:]:
        key, value = row.split("|")[1:3]
        # the key cell; a value cell may document a sibling key ("; `saved_detail`: ...")
        documented += re.findall(r"`([a-z_]+)`", key) + re.findall(r"`([a-z_]+)`:", value)
    assert set(printed) <= set(documented), set(printed) - set(documented)

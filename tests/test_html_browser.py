"""The HTML sheets in a real browser: headless Chromium (Debian's package)
driven by Selenium through Debian's chromedriver (tests/browser.py).

Each page is loaded once.  Expected numbers come from ``symflops eval
--json`` (exact integers, computed by SymPy in Python), read back from the
page's cells after the dims are typed into its inputs: a cell that differs
fails the test.  Skipped, with the reason, where no browser is installed."""

from __future__ import annotations

import contextlib
import io
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

import browser
from test_hf_import import QWEN25_05B
import forked

ROOT = Path(__file__).resolve().parent.parent
WHY = browser.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no browser test: {WHY}")


def cli(*args):
    """A command's standard output, run in this process through
    :func:`symflops.cli.main` (the pages and eval's numbers, not the process,
    are under test; the build below, with its workers, runs as a process)."""
    from symflops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(map(str, args)))
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def driver():
    d = browser.start(1280, 900)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """ffn, llama and an imported model (Qwen2.5-0.5B's config through import-hf), as HTML."""
    folder = tmp_path_factory.mktemp("html")
    (folder / "config.json").write_text(json.dumps(QWEN25_05B))
    cli("import-hf", folder / "config.json", "-o", folder / "qwen.yaml")
    files = {"ffn": ROOT / "derivations" / "ffn.yaml", "llama": ROOT / "derivations" / "llama.yaml",
             "qwen": folder / "qwen.yaml"}
    for name, path in files.items():
        cli("render", path, "--format", "html", "-o", folder / f"{name}.html")
    return folder, files


def load(driver, path):
    driver.get(path.as_uri())
    driver.get_log("browser")  # (the log of the page before, if any, is dropped here)
    return driver


def severe(driver):
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def set_dims(driver, values, precision=None, attention=None):
    """Type each dim's value into its input (as a person would, replacing
    what is there) and choose the conventions; return every cell's exact value."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    names = driver.execute_script(
        "return JSON.parse(document.getElementById('live-data').textContent).dims.map(d => d.name)")
    for i, name in enumerate(names):
        box = driver.find_element(By.CSS_SELECTOR, f'input[data-dim="{i}"]')
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(str(values[name]))
    if precision:
        Select(driver.find_element(By.CSS_SELECTOR, "select[data-choice=precision]")).select_by_value(precision)
    if attention:
        Select(driver.find_element(By.CSS_SELECTOR, "select[data-choice=attention]")).select_by_value(attention)
    return driver.execute_script("""
        const out = {};
        for (const c of document.querySelectorAll('[data-q][data-show=exact]'))
            out[c.dataset.q] = c.dataset.exact === undefined ? null : c.dataset.exact;
        return out;""")


def compare(page, expected):
    """Every quantity of ``eval --json`` against the page's exact value."""
    assert set(page) == set(expected), set(page) ^ set(expected)
    for name, value in expected.items():
        shown = page[name]
        assert shown is not None, f"{name}: no number on the page"
        got = Fraction(shown)
        if isinstance(value, int):
            assert got == value, f"{name}: page {shown}, eval {value}"
        else:  # eval prints a value that is not an integer as a float
            assert abs(float(got) - value) <= 1e-12 * abs(value), f"{name}: page {shown}, eval {value}"


def evaluated(path, values, precision=None):
    args = ["eval", path, *(f"{k}={v}" for k, v in values.items()), "--json"]
    if precision:
        args += ["--precision", precision]
    return json.loads(cli(*args))["quantities"]


# The configurations typed in: small odd values (every term of a polynomial
# counts), and values past 2^53 and 2^64 where a float would round.
CASES = [
    ("ffn", {"B": 3, "D": 5, "F": 7}, None),
    ("ffn", {"B": 123456789012345678901, "D": 98765432109876543, "F": 3}, "fp32-adam"),
    ("llama", {"L": 2, "V": 1001, "B": 3, "S": 17, "D": 64, "N": 8, "G": 2, "E": 8, "F": 100},
     "mixed-adam"),
    ("llama", {"L": 80, "V": 128256, "B": 1024, "S": 131072, "D": 16384, "N": 128, "G": 8,
               "E": 128, "F": 53248}, None),
]


@pytest.mark.parametrize("name, values, precision", CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_the_page_gives_evals_numbers_at_typed_dims(driver, pages, name, values, precision):
    folder, files = pages
    load(driver, folder / f"{name}.html")
    shown = set_dims(driver, values, precision)
    compare(shown, evaluated(files[name], values, precision))
    assert not severe(driver)


def test_an_imported_models_page_gives_evals_numbers(driver, pages):
    folder, files = pages
    load(driver, folder / "qwen.html")
    dims = driver.execute_script(
        "return JSON.parse(document.getElementById('live-data').textContent).dims.map(d => d.name)")
    # the config's own values first (prefilled from its example), then others typed in
    example = dict(zip(dims, driver.execute_script(
        "return JSON.parse(document.getElementById('live-data').textContent).examples[0].values")))
    values = {k: v + 3 if k in ("B", "S") else v for k, v in example.items()}
    compare(set_dims(driver, values), evaluated(files["qwen"], values))
    assert not severe(driver)


def test_a_value_that_is_not_a_positive_integer_is_refused_in_place(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder, _ = pages
    load(driver, folder / "llama.html")
    for bad in ("0", "-4", "1.5", "abc", "1e3", "", "9" * 301):
        box = driver.find_element(By.CSS_SELECTOR, 'input[data-dim="3"]')  # S
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(bad or Keys.BACKSPACE)
        message = driver.find_element(By.CSS_SELECTOR, '[data-refusal="3"]').text
        assert message.startswith("S ") and ("positive integer" in message or "digits" in message), \
            (bad, message)
        # (the page's rendered text; WebDriver's .text of the whole body takes seconds)
        body = driver.execute_script("return document.body.innerText")
        assert "NaN" not in body and "undefined" not in body and "Infinity" not in body
        assert driver.execute_script(
            "return [...document.querySelectorAll('[data-q]')].every(c => c.textContent === '\u2014')")
    # a defined dim that does not divide: R = N / G at N = 32, G = 5
    shown = set_dims(driver, {"L": 32, "V": 32000, "B": 1, "S": 4096, "D": 4096, "N": 32, "G": 5,
                              "E": 128, "F": 11008})
    assert set(shown.values()) == {None}
    status = driver.find_element(By.CSS_SELECTOR, "[data-status]").text
    assert "R = N/G is 32/5" in status and "not a positive whole number" in status, status
    assert not severe(driver)


def test_the_attention_convention_is_chosen_on_the_page(driver, pages):
    folder, _ = pages
    load(driver, folder / "llama.html")
    values = {"L": 1, "V": 10, "B": 1, "S": 5, "D": 4, "N": 2, "G": 1, "E": 2, "F": 3}
    exact = set_dims(driver, values)
    square = set_dims(driver, values, attention="full-square")
    # by hand: the causal products of one layer, one sequence of S = 5 tokens, N = 2 heads of
    # E = 2: scores Q K^T and P V each 2*E per (query, key) pair and head; the exact count
    # has S(S+1)/2 = 15 pairs, the full square S^2 = 25, so forward differs by
    # 2 products * 2E * N * (25 - 15) = 2 * 4 * 2 * 10 = 160 FLOPs
    assert Fraction(square["attention_flops.forward"]) - Fraction(exact["attention_flops.forward"]) == 160
    assert square["params"] == exact["params"]


def test_a_sheet_fits_a_1280_pixel_viewport(driver, pages, tmp_path):
    folder, _ = pages
    for name in ("ffn", "llama", "qwen"):
        load(driver, folder / f"{name}.html")
        assert driver.execute_script("return window.innerWidth") == 1280
        assert driver.execute_script("return document.documentElement.scrollWidth") <= \
            driver.execute_script("return document.documentElement.clientWidth"), name
        # no paragraph or list item of text reaches past the viewport
        over = driver.execute_script("""
            const w = document.documentElement.clientWidth;
            return [...document.querySelectorAll('p, li, h1, h2, h3, figcaption')]
                .filter(e => e.getBoundingClientRect().right > w).map(e => e.textContent.slice(0, 60));""")
        assert not over, (name, over)
        assert driver.save_screenshot(str(tmp_path / f"{name}.png"))


def check_page(driver, path):
    """A page of a build: loads with no console error; every formula is
    rendered MathML (no TeX in the text a reader sees); its figures are drawn;
    the live numbers are filled in."""
    load(driver, path)
    assert not severe(driver), (path.name, severe(driver))
    text = driver.execute_script("return document.body.innerText")
    assert not re.search(r"\\[A-Za-z]+|\$", text), (path.name, re.findall(r".{30}(?:\\[A-Za-z]+|\$).{30}", text)[:3])
    assert "NaN" not in text
    maths = driver.execute_script("""
        return [...document.querySelectorAll('math')].map(m => {
            const r = m.getBoundingClientRect();
            return [r.width > 0 && r.height > 0, m.constructor.name];});""")
    assert maths and all(ok for ok, _ in maths), path.name  # each drawn, with a size
    assert {kind for _, kind in maths} == {"MathMLElement"}, path.name  # the browser read it as MathML
    return text


def test_ffn_llama_and_the_imported_pages_load_clean(driver, pages):
    folder, _ = pages
    for name in ("ffn", "llama", "qwen"):
        text = check_page(driver, folder / f"{name}.html")
        figures = driver.execute_script(
            "return [...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().height)")
        assert figures and all(h > 50 for h in figures), (name, figures)
        assert driver.execute_script("return document.getElementById('live').dataset.ready") == "true"
        assert "Live numbers" in text


@pytest.mark.slow
def test_every_sheet_of_a_build_loads_clean(driver, tmp_path):
    """``symflops build --format html``: every shipped declaration's page, the
    gallery and the reference's pages."""
    out = tmp_path / "build"
    result = forked.run("build", "--out", str(out), "--format", "html", "-j", "2", "--docs", str(ROOT / "docs"))
    assert result.returncode == 0, result.stderr
    sheets = sorted(p for p in out.glob("*.html") if p.name != "index.html")
    assert len(sheets) == len(list((ROOT / "derivations").glob("*.yaml")))
    for path in sheets:
        check_page(driver, path)
        assert driver.execute_script("return document.getElementById('live').dataset.ready") == "true"
        assert driver.execute_script("return document.querySelectorAll('figure svg').length") >= 1, path.name
    load(driver, out / "index.html")
    assert not severe(driver)
    links = driver.execute_script("return [...document.querySelectorAll('.gallery a')].map(a => a.href)")
    assert sorted(Path(l.split('/')[-1]).name for l in links) == [p.name for p in sheets]
    docs = sorted((out / "docs").glob("*.html"))
    assert len(docs) == len(list((ROOT / "docs").glob("*.md")))
    for path in docs:
        load(driver, path)
        assert not severe(driver), path.name


def test_a_page_whose_numbers_differ_from_eval_fails_the_comparison(driver, pages, tmp_path):
    """The comparison above can fail: ffn's page with one constant of its
    table changed by one (a coefficient of its polynomials) shows numbers
    that differ from eval's, and compare says which."""
    from symflops.sheets.live import script_json

    folder, files = pages
    text = (folder / "ffn.html").read_text(encoding="utf-8")
    m = re.search(r'(<script type="application/json" id="live-data">)(.*?)(</script>)', text, re.S)
    data = json.loads(m.group(2))
    k = next(i for i, n in enumerate(data["nodes"]) if isinstance(n, str) and n.isdigit()
             and int(n) > 1)
    data["nodes"][k] = str(int(data["nodes"][k]) + 1)
    tampered = tmp_path / "ffn.html"
    tampered.write_text(text[:m.start(2)] + script_json(data) + text[m.end(2):], encoding="utf-8")
    values = {"B": 3, "D": 5, "F": 7}
    load(driver, tampered)
    with pytest.raises(AssertionError, match=r"page \d+, eval \d+"):
        compare(set_dims(driver, values), evaluated(files["ffn"], values))
    # and the untouched page agrees
    load(driver, folder / "ffn.html")
    compare(set_dims(driver, values), evaluated(files["ffn"], values))

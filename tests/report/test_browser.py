"""The HTML report in a real browser: headless Chromium opens it offline, every figure is
there, nothing logs an error, and no script from the data runs.

Needs Debian's chromium (``.ci/run`` installs it) and the playwright package (a dev
dependency); without them the test is skipped with the reason.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import report_fixture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags keep Chromium off the network: this machine refuses outside connections.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium found (install Debian's chromium package; .ci/run does)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def opened(browser, path: Path):
    """The page at ``path`` in a new tab, and the list of problems it logs."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: (problems.append("dialog: " + d.message), d.dismiss()))
    # Any request leaving the file (a CDN, a font) would break "opens offline".
    page.on("request", lambda r: problems.append(r.url) if not r.url.startswith("file:") else None)
    page.goto(path.as_uri())
    return page, problems


# The figures of the studies (speed-up, precision, layers across systems, relative time to
# train, learning curves, host API time and communication share against devices):
# report_fixture.build(studies=True) holds the data of each.
STUDIES = (
    "speedup-vs-devices-cifarnet-b32-fp32-cpu",
    "precision-speedup-bf16",
    "layers-across-systems-cifarnet-b16-fp32",
    "time-to-train-relative-cifarnet",
    "convergence-cifarnet-cifar10",
    "host-api-vs-devices-resnet50",  # the H200's profiles (system B)
    "comm-share-vs-devices-vm",  # 1 and 2 gloo ranks of this VM (system A)
    "comm-share-vs-devices-big-cpu",
)


def drawn_figures(page) -> list[str]:
    """The ids of the page's figures, each checked to be drawn with a size."""
    ids = page.eval_on_selector_all("figure.chart", "els => els.map(e => e.id)")
    assert page.locator("figure.chart svg").count() == len(ids)
    for figure_id in ids:  # each figure is drawn with a size, not an empty box
        box = page.locator(f"[id='{figure_id}'] svg").bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100, figure_id
    return ids


def test_report_opens_with_every_figure_and_no_error(browser, tmp_path, run_cli):
    db = tmp_path / "two.db"
    report_fixture.build(db, studies=True)
    code, out, err = run_cli(["report", "--db", db, "--out", tmp_path / "site", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    page, problems = opened(browser, Path(summary["path"]))
    screenshot = tmp_path / "report.png"
    page.screenshot(path=str(screenshot), full_page=True)

    assert problems == []
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ids = drawn_figures(page)
    assert ids == summary["figures"] and len(ids) >= 8
    # The studies' figures are drawn too, each with its data table (folded: one click).
    for prefix in STUDIES:
        figure_id = next(i for i in ids if i.startswith(prefix))
        details = page.locator(f"[id='{figure_id}'] details summary")
        assert details.first.text_content().startswith("Data of the figure"), figure_id
    # The hostile model name is shown as text, not run.
    assert page.get_by_text("<script>alert(1)</script>").count() >= 1
    page.close()


def test_a_fleet_report_opens_page_by_page_with_every_figure(browser, tmp_path, run_cli):
    db = tmp_path / "fleet.db"
    report_fixture.build_fleet(db, systems=30)
    code, out, err = run_cli(["report", "--db", db, "--out", tmp_path / "site", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    index, problems = opened(browser, Path(summary["path"]))
    links = index.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
    pages = sorted({link for link in links if not link.startswith("#")})
    assert pages == sorted(set(summary["pages"]) - {"index.html"})
    index.close()
    assert all((tmp_path / "site" / name).is_file() for name in pages)
    # Every page with figures, compare and failures; of the system pages (one template,
    # a table each) the first and the last.
    systems = [name for name in pages if name.startswith("system-")]
    seen = []
    for name in [name for name in pages if name not in systems[1:-1]]:
        page, page_problems = opened(browser, tmp_path / "site" / name)
        problems += page_problems
        seen += drawn_figures(page)
        if name == "cases.html":  # a folded table opens on a click, no script needed
            page.locator("details summary").first.click()
            assert page.get_by_text("node00", exact=True).first.is_visible()
        page.close()
    assert problems == []
    assert sorted(seen) == sorted(summary["figures"]) and len(seen) >= 15
    assert summary["systems"] == 30

"""The course in a real browser, headless Chromium driven by Playwright:

- the website (`docs/`), built as the README says from the notebooks' saved outputs, opened page by page from files
  with every request outside the site blocked: nothing is blocked, no console error, every image loads, the math is
  typeset, search finds "softmax", and notebook 09's attention explorer changes its picture when another head or
  view is clicked, with no kernel;
- notebook 09 in JupyterLab on 127.0.0.1, Run All Cells from the menu: the live attention widget must draw, and
  moving its layer slider must redraw it.

Uses the system's Chromium (`apt-get install chromium`), never a browser downloaded by `playwright install`.
Without it (or without Sphinx, for the site) the tests are skipped locally; under CI (`CI=1`, set by .ci/run) they
fail instead, so CI really proves that the site and the widget work. Screenshots go to the test's temporary folder
(pytest keeps the last few sessions' folders)."""

import importlib.util
import io
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import missing_tool

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "09_attention_maps.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
DONE_TEXT = "segment B starts after the first [SEP]"  # printed by the notebook's last code cell

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_settings(directory: Path) -> None:
    "JupyterLab settings for a quiet, fully rendered notebook: no news pop-up, no update check, no windowing."
    overrides = {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        # windowed rendering would leave cells outside the viewport out of the page
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }
    for name, values in overrides.items():
        path = directory / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture
def jupyter_lab(tmp_path):
    "A JupyterLab server on a free port of 127.0.0.1 with a token, serving a copy of notebook 09; yields its URL."
    # a copy without outputs: the repository's file stays untouched, and old outputs cannot pass for new ones;
    # it sits in notebooks/ beside a link to the shipped models, as in the repository, for its `../models` path
    notebook = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    notebook["metadata"].pop("widgets", None)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / NOTEBOOK).write_text(json.dumps(notebook), encoding="utf-8")
    (tmp_path / "models").symlink_to(ROOT / "models", target_is_directory=True)
    lab_settings(tmp_path / "settings")
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "BERTLIB_QUICK": "1",
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = open(tmp_path / "jupyter.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--allow-root",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path}",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'jupyter.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield f"{base}/lab/tree/notebooks/{NOTEBOOK}?token={token}"
    finally:
        try:  # a clean shutdown also stops the kernel
            urllib.request.urlopen(
                urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST"), timeout=10
            )
            server.wait(timeout=30)
        except Exception:
            server.kill()
            server.wait()
        log.close()


def distinct_colours(png: bytes) -> int:
    from PIL import Image

    return len(Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 24))


def wait_for_run_all(page, timeout_s: float = 180) -> None:
    "Wait until the last code cell has printed, failing early with the traceback if a cell raised."
    deadline = time.monotonic() + timeout_s
    while not page.locator(".jp-OutputArea-output", has_text=DONE_TEXT).count():
        errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] pre')
        traceback = [text for text in errors.all_inner_texts() if "Traceback" in text or "Error" in text]
        assert not traceback, "a cell failed in the browser:\n" + traceback[0][-3000:]
        assert time.monotonic() < deadline, f"the notebook did not finish within {timeout_s} s"
        time.sleep(1)


@pytest.fixture
def playwright_api():
    "Playwright's synchronous API, once the system's Chromium and Playwright are known to be there."
    if not CHROMIUM.exists():
        missing_tool(f"{CHROMIUM} not found: install Debian's Chromium (apt-get install chromium)")
    try:
        import playwright.sync_api
    except ImportError:
        missing_tool("Playwright for Python is not installed (pip install playwright; no browser download needed)")
    return playwright.sync_api


def test_attention_widget_in_jupyterlab(playwright_api, jupyter_lab, tmp_path):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(jupyter_lab)
            page.locator(".jp-Notebook").wait_for(timeout=60_000)
            try:  # JupyterLab may ask which kernel to start: the notebook's own
                page.locator(".jp-Dialog .jp-mod-accept").click(timeout=10_000)
            except playwright_api.TimeoutError:
                pass
            page.locator(".lm-MenuBar-item", has_text="Run").first.click()
            page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()
            wait_for_run_all(page)

            widget = page.locator(".bertlib-attention").first
            widget.scroll_into_view_if_needed()
            image = widget.locator("img").first
            image.wait_for(timeout=30_000)
            before_src, before = image.get_attribute("src"), widget.screenshot()
            (tmp_path / "attention_widget_layer0.png").write_bytes(before)

            # drag the layer slider's handle to the far right: the last layer
            handle = widget.locator(".widget-slider .noUi-handle").first
            track = widget.locator(".widget-slider .noUi-target").first.bounding_box()
            box = handle.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.mouse.down()
            page.mouse.move(track["x"] + track["width"] + 20, box["y"] + box["height"] / 2, steps=10)
            page.mouse.up()
            page.wait_for_function(
                "([img, src]) => img.src !== src", arg=[image.element_handle(), before_src], timeout=30_000
            )
            readout = widget.locator(".widget-readout").first.inner_text().strip()
            after = widget.screenshot()
            (tmp_path / "attention_widget_last_layer.png").write_bytes(after)
        except Exception:
            page.screenshot(path=str(tmp_path / "jupyterlab_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert readout == "3", f"the slider shows layer {readout}, expected the last layer of the mini model"
    assert after != before, "moving the layer slider did not change the widget"
    for shot in (before, after):
        assert distinct_colours(shot) > 100, "the widget's screenshot is (almost) blank"


# ------------------------------------------------------------------------------------------------------ the website

SITE_COMMAND = ["-m", "sphinx", "-q", "-W", "--keep-going", "-c", "docs", "."]  # the README's, warnings as errors
# the tags that make a browser fetch something: none may point outside the site
FETCHES = re.compile(
    r"<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=\"(?:https?:)?//|<link\b[^>]*\bhref=\"(?:https?:)?//"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    "The website, built as the README builds it (warnings are errors here), into a temporary folder."
    missing = [name for name in ("sphinx", "myst_nb", "sphinx_book_theme") if importlib.util.find_spec(name) is None]
    if missing:
        missing_tool(f"{', '.join(missing)} not installed: pip install -r requirements.txt")
    out = tmp_path_factory.mktemp("site") / "html"
    done = subprocess.run(
        [sys.executable, *SITE_COMMAND, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"the site did not build cleanly:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    return out


def site_pages(site: Path) -> list[Path]:
    "Every page a reader opens: the course, the results pages and reports, search and the index."
    return [
        p for p in sorted(site.rglob("*.html")) if p.parts[len(site.parts)] != "_static" and p != site / "index.html"
    ]


def test_the_site_is_built_from_the_saved_notebooks_and_loads_nothing_from_elsewhere(site):
    "A page for each notebook with its .ipynb to download, the README's command in it, no tag that fetches outside."
    assert SITE_COMMAND[1:] == ["sphinx", "-q", "-W", "--keep-going", "-c", "docs", "."]
    assert "python -m sphinx -q -c docs . docs/_build/html" in (ROOT / "README.md").read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = site / "notebooks" / f"{notebook.stem}.html"
        assert page.is_file() and (site / "_sources" / "notebooks" / notebook.name).is_file(), notebook.name
        assert f"{notebook.name}" in page.read_text(encoding="utf-8"), f"{page.name} does not link its notebook"
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not FETCHES.search(text), f"{page} loads {FETCHES.search(text).group(0)}"
        assert "require.js" not in text and "widget-view+json" not in text, f"{page} needs a widget manager"
    assert "bertlib-explorer" in (site / "notebooks" / "09_attention_maps.html").read_text(encoding="utf-8")


@pytest.fixture
def offline_page(playwright_api, site):
    """A Chromium page that may load only the site's files: every other request is blocked and recorded, and so is
    every console error. Yields (page, blocked, errors)."""
    base = site.as_uri()
    blocked, errors = [], []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})

        def route(request_route):
            url = request_route.request.url
            if url.startswith((base, "data:")):
                request_route.continue_()
            else:
                blocked.append(url)
                request_route.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            yield page, blocked, errors
        finally:
            browser.close()


def test_every_page_of_the_site_works_offline(offline_page, site):
    page, blocked, errors = offline_page
    pages = site_pages(site)
    assert len(pages) >= 13 + 9, [p.name for p in pages]
    for path in pages:
        page.goto(path.as_uri(), wait_until="load")
        where = path.relative_to(site)
        if page.locator(".math").count():
            page.wait_for_function("document.querySelectorAll('mjx-container').length > 0", timeout=30_000)
            assert not page.locator(".math:not(:has(mjx-container))").count(), f"{where}: math left untypeset"
        broken = page.evaluate(
            "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"
        )
        assert not broken, f"{where}: images that did not load: {broken}"
        assert not blocked and not errors, f"{where}: blocked {blocked}, console errors {errors}"
    page.goto((site / "search.html").as_uri() + "?q=softmax", wait_until="load")
    page.locator("#search-results li").first.wait_for(timeout=30_000)
    found = page.locator("#search-results li a").all_inner_texts()
    assert any("Self-attention" in title or "attention" in title.lower() for title in found), found
    page.goto((site / "index.html").as_uri(), wait_until="load")  # the site's root opens the course
    page.wait_for_url("**/docs/index.html", timeout=10_000)
    assert not blocked and not errors, f"search and the root: blocked {blocked}, console errors {errors}"


def test_the_attention_explorer_changes_its_picture_with_no_kernel(offline_page, site, tmp_path):
    "Notebook 09's page: clicking another head, view, layer or a thumbnail of the model view shows another picture."
    page, blocked, errors = offline_page
    page.goto((site / "notebooks" / "09_attention_maps.html").as_uri(), wait_until="load")
    explorer = page.locator(".bertlib-explorer").first
    explorer.scroll_into_view_if_needed()

    def shown() -> str:
        (key,) = explorer.locator(".bx-view:not([hidden])").evaluate_all("views => views.map(v => v.dataset.key)")
        return key

    pictures = {shown(): explorer.screenshot()}
    clicks = [
        ('button[data-set="head"][data-value="2"]', "heatmap/0/2"),
        ('button[data-set="view"][data-value="head view"]', "head view/0/2"),
        ('button[data-set="layer"][data-value="3"]', "head view/3/2"),
        ('button[data-set="view"][data-value="model view"]', "model view"),
        ('button[data-layer="1"][data-head="3"]', "heatmap/1/3"),
    ]
    assert list(pictures) == ["heatmap/0/mean"]
    for selector, expected in clicks:
        explorer.locator(selector).click()
        assert shown() == expected, f"after {selector}: {shown()}"
        picture = explorer.screenshot()
        (tmp_path / f"explorer-{len(pictures)}.png").write_bytes(picture)
        assert picture not in pictures.values(), f"{selector} left the picture as it was"
        assert distinct_colours(picture) > 50, f"{expected} is (almost) blank"
        pictures[expected] = picture
    assert not blocked and not errors, f"blocked {blocked}, console errors {errors}"

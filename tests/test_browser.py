"""Notebook 09 in a real browser: JupyterLab on 127.0.0.1, headless Chromium driven by Playwright, Run All Cells from
the menu, then the attention widget must draw, and moving its layer slider must redraw it.

Uses the system's Chromium (`apt-get install chromium`), never a browser downloaded by `playwright install`.
Without it the test is skipped locally; under CI (`CI=1`, set by .ci/run) it fails instead, so CI really proves
that the widget works. Screenshots go to the test's temporary folder (pytest keeps the last few sessions' folders)."""

import io
import json
import os
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

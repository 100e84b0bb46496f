"""In the browser, as a student: change a control of a notebook's first panel, press its Run
button, wait for the status to say "done" and check that the figure drew something new.

One control and one cheap value per chapter (``CLICKS``: the control's label and the value typed
or chosen). A screenshot of the panel after the run goes to
``test-artifacts/panel-clicks/<notebook>.png`` for review, pass or fail.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "panel-clicks"
DONE_TIMEOUT_S = 180
PANEL_TIMEOUT_S = 60

# notebook -> (label of a control in its first panel, the new value): quick settings.
CLICKS = {
    "00_welcome": ("cores", "1"),
    "01_gpu_vs_cpu": ("size", "64,128"),
    "02_topology": ("gpus", "4"),
    "03_profiling": ("steps", "20"),
    "04_storage": ("format", "memmap"),
    "05_hogwild_parameter_server": ("workers", "1"),
    "06_data_parallel": ("batch size", "32"),
    "06_model_parallel": ("batch size", "32"),
    "08_search_autotuning": ("trials", "2"),
    "09_memory_precision": ("depth", "4"),
    "09_sharding": ("depth", "3"),
}

# Panels after the first, pressed too: notebook -> [(a control label only that panel has, the
# new value)]; the panel is the first output holding a control with that label.
MORE_CLICKS = {
    "03_profiling": [("batch size", "32")],  # section 8's torch.compile panel
    "04_storage": [("epochs", "4")],  # section 3's loader knobs
    "06_data_parallel": [
        ("lr rule", "linear"),  # section 8's time-to-accuracy view
        ("algorithm", "tree"),  # section 5's all-reduce algorithms, measured beside the model
        ("fault", "shape"),  # section 7's planted hang
    ],
    "08_search_autotuning": [("eta", "2")],  # section 6's ASHA view
    "09_sharding": [("gpus per node", "4")],  # section 3's planner, its HSDP bar
}

# The output holding the first panel: controls and a Run button.
PANEL = ".jp-OutputArea-output:has(.hpclab-control):has(button:text-is('Run'))"
JS_PANEL_PLOT = """(panel) => {
  const el = panel.querySelector('.hpclab-figure .js-plotly-plot');
  if (!el || !el.data) return null;
  return JSON.stringify(el.data, (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v);
}"""


def _set_control(panel, label: str, value: str) -> None:
    """Give the control labelled ``label`` the value ``value`` as a student would."""
    box = panel.locator(".hpclab-control").filter(
        has=panel.page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}$"))
    )
    assert box.count(), f"no control labelled {label!r} in the first panel"
    box = box.first
    box.scroll_into_view_if_needed()
    page = panel.page
    if box.locator("select").count():
        box.locator("select").first.select_option(label=value)
    elif box.locator(".widget-readout").count():  # slider: type into its readout
        readout = box.locator(".widget-readout").first
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(value)
        page.keyboard.press("Enter")
    else:
        field = box.locator("input").first
        field.fill(value)
        field.press("Enter")


def click_first_panel(page, stem: str) -> str:
    """Change the first panel's control, press Run, wait for "done"; return what was done
    (empty for a notebook without a panel: not in ``CLICKS``); then the same for the panels
    of ``MORE_CLICKS``."""
    if stem not in CLICKS:
        return ""
    label, value = CLICKS[stem]
    done = [_press(page, page.locator(PANEL).first, stem, label, value, stem)]
    for k, (label, value) in enumerate(MORE_CLICKS.get(stem, ()), start=2):
        has = page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}$"))
        panel = page.locator(PANEL).filter(has=has).first
        done.append(_press(page, panel, stem, label, value, f"{stem}-panel{k}"))
    return "; ".join(done)


def _press(page, panel, stem: str, label: str, value: str, shot: str) -> str:
    """Set ``label`` to ``value`` in ``panel``, press its Run, wait for "done" and a new figure;
    a screenshot of the panel goes to ``<shot>.png``."""
    panel.wait_for(timeout=PANEL_TIMEOUT_S * 1000)  # after a reload widgets render late
    before = panel.evaluate(JS_PANEL_PLOT)
    _set_control(panel, label, value)
    panel.locator("button:text-is('Run')").first.click()
    status = panel.locator(".widget-html-content").first
    text, after = "", before
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while time.monotonic() < deadline:  # "done" and a new figure (a "done" of the run before
        text = status.inner_text().strip()  # the click may still show for a moment)
        after = panel.evaluate(JS_PANEL_PLOT)
        if text.startswith(("error", "cancelled")) or (text.startswith("done") and after != before):
            break
        page.wait_for_timeout(250)
    page.wait_for_timeout(500)  # let plotly finish drawing before the screenshot
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=str(ARTIFACTS / f"{shot}.png"))
    assert text.startswith("done"), f"{stem}: Run with {label}={value} ended with {text!r}"
    assert after is not None and after != before, f"{stem}: the figure did not change after Run"
    return f"Run with {label}={value}: {text.splitlines()[0]}"

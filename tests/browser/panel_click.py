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
}
# Panels after the first that are pressed too: notebook -> [(panel index, label, value)].
LATER_CLICKS = {
    "08_search_autotuning": [(1, "trials", "6")],  # section 6: the ASHA view
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
    (empty for a notebook without a panel: not in ``CLICKS``); then the same for the later
    panels of ``LATER_CLICKS``."""
    if stem not in CLICKS:
        return ""
    done = [_click_panel(page, stem, 0, *CLICKS[stem])]
    done += [_click_panel(page, stem, *later) for later in LATER_CLICKS.get(stem, [])]
    return "; ".join(done)


def _click_panel(page, stem: str, nth: int, label: str, value: str) -> str:
    panel = page.locator(PANEL).nth(nth)
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
    name = stem if nth == 0 else f"{stem}-panel{nth + 1}"
    panel.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    assert text.startswith("done"), f"{name}: Run with {label}={value} ended with {text!r}"
    assert after is not None and after != before, f"{name}: the figure did not change after Run"
    return f"Run with {label}={value}: {text.splitlines()[0]}"

"""Real-browser test: open a notebook in JupyterLab (headless Chromium), Run All, check it.

Checks, in order: every code cell ran (has an execution count) with the kernel idle again; no
output shows a Python traceback; at least one ipywidgets widget and one plotly plot rendered;
moving the notebook's control changes the data of the plot it drives; after saving and
reloading the page (the kernel still running) every live figure draws again, and the control
still drives it; then a control of the first panel changed and its Run button pressed ends in
"done" with a new figure (panel_click.py).

Convention shared with the notebooks: the interactive control (a slider or dropdown) carries the
CSS class ``hpclab-control`` (``widget.add_class("hpclab-control")``) and the live figure it
drives (:class:`hpclab.widgets.FigureView`) carries ``hpclab-figure``; without the latter the
last plotly plot on the page is used.

Run:  pytest -m browser tests/browser -v
Env:  HPCLAB_BROWSER_NOTEBOOK=path.ipynb  test that notebook instead of notebooks/00_welcome.ipynb
      HPCLAB_REQUIRE_BROWSER=1            a missing Chromium/Playwright fails instead of skipping
      HPCLAB_CHROMIUM=/path/to/chromium   another Chromium binary (default /usr/bin/chromium)
      HPCLAB_SCREENSHOTS=dir              save dir/<notebook>-run.png and -reload.png (for review)
Only the notebook file is copied into the server's temporary root (no sibling files).
On failure: test-artifacts/<test id>/ holds screenshot.png, page.txt, console.txt, jupyter-lab.log.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from panel_click import click_first_panel
from stored_outputs import mismatches, wait_saved

# The bound on a whole chapter (Run All, then a reload): generous, as Run All's wait follows
# progress and a loaded machine runs a chapter several times slower than a quiet one.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = Path(__file__).with_name("demo_widget.ipynb")
NOTEBOOK = Path(os.environ.get("HPCLAB_BROWSER_NOTEBOOK", "notebooks/00_welcome.ipynb"))
if not NOTEBOOK.is_absolute():
    NOTEBOOK = REPO_ROOT / NOTEBOOK

KERNEL_IDLE_TIMEOUT_S = 90
CELL_STALL_TIMEOUT_S = 240  # Run All fails when no cell finishes within this (a hang)
PLOT_CHANGE_TIMEOUT_S = 20
RELOAD_DRAW_TIMEOUT_S = 60
SCREENSHOTS = os.environ.get("HPCLAB_SCREENSHOTS")

# --- selectors ---------------------------------------------------------------------------------
NOTEBOOK_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
KERNEL_INDICATOR = f"{NOTEBOOK_PANEL} .jp-Notebook-ExecutionIndicator"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
WIDGET = ".jp-OutputArea-output .jupyter-widgets"
PLOT = ".js-plotly-plot"
CONTROL = ".hpclab-control"
FIGURE = ".hpclab-figure.js-plotly-plot, .hpclab-figure .js-plotly-plot"
LIVE_FIGURES = ".hpclab-figure"

# Error text: IPython tracebacks, or a bare "SomethingError: ..." line (SyntaxError has no
# "Traceback" header). Warnings on stderr ("UserWarning: ...") are allowed.
ERROR_RE = re.compile(r"Traceback|^\s*[\w.]*(Error|Exception)\b", re.MULTILINE)

# JS run in the page -----------------------------------------------------------------------------
# The kernel is really idle: the toolbar indicator says so AND the status bar names a kernel.
# (The indicator alone reads "idle" while the status bar still says "No Kernel | Initializing";
# Run All at that moment silently runs nothing.)
JS_KERNEL_IDLE = """() => {
  const ind = document.querySelector(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  if (!ind || ind.dataset.status !== 'idle') return false;
  return Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).some(
    e => /^(?!No Kernel).+[|]\\s*Idle\\s*$/.test(e.textContent.trim()));
}"""
# Prompts of the non-empty code cells, e.g. ["[1]:", "[*]:", "[ ]:"].
JS_PROMPTS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell'))
  .filter(c => (c.querySelector('.jp-InputArea-editor .cm-content')?.textContent ?? 'x').trim())
  .map(c => (c.querySelector('.jp-InputArea-prompt')?.textContent ?? '').trim())"""
# Texts of outputs that look like errors.
JS_ERRORS = """(stderrSel) => {
  const out = [];
  for (const el of document.querySelectorAll(stderrSel)) out.push(el.innerText);
  for (const el of document.querySelectorAll('.jp-RenderedText')) {
    if (el.innerText.includes('Traceback (most recent call last)')) out.push(el.innerText);
  }
  for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
    if (el.innerText.includes('Error displaying widget')) out.push(el.innerText);
  }
  return out;
}"""
# The plotly data of the figure under test, as JSON (typed arrays become plain arrays).
JS_PLOT_DATA = """(sel) => {
  const el = document.querySelector(sel);
  if (!el || !el.data) return null;
  return JSON.stringify(el.data, (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v);
}"""


def _params():
    yield pytest.param(DEMO, id="demo_widget")
    mark = () if NOTEBOOK.exists() else pytest.mark.skip(reason=f"{NOTEBOOK} does not exist yet")
    yield pytest.param(NOTEBOOK, id=NOTEBOOK.stem, marks=mark)


def _error_outputs(page) -> list[str]:
    return [t for t in page.evaluate(JS_ERRORS, STDERR) if ERROR_RE.search(t)]


def _dismiss_dialogs(page) -> None:
    """Accept a kernel-selection or similar dialog (e.g. a kernelspec name that is not here)."""
    accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
    if accept.count():
        accept.first.click()


def _wait_kernel_idle(page, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _dismiss_dialogs(page)
        if page.evaluate(JS_KERNEL_IDLE):
            return
        page.wait_for_timeout(250)
    status = page.locator(KERNEL_INDICATOR).first.get_attribute("data-status", timeout=1000)
    raise AssertionError(f"kernel not idle after {timeout_s:.0f} s (status: {status})")


def _run_all(page, attempts: int = 3, start_timeout_s: float = 15) -> None:
    """Run → Run All Cells from the main menu; check that some cell started (else retry)."""
    for _ in range(attempts):
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-item", has_text=re.compile(r"^Run All Cells")).first.click()
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if any(p != "[ ]:" for p in page.evaluate(JS_PROMPTS)):
                return
            page.wait_for_timeout(200)
        _wait_kernel_idle(page, KERNEL_IDLE_TIMEOUT_S)
    raise AssertionError(f"Run All Cells started no cell ({attempts} attempts)")


def _wait_all_executed(page, stall_s: float) -> list[str]:
    """Wait while Run All makes progress: fail only when no further cell finished within
    ``stall_s`` (a cell that hangs), however long the whole notebook takes on a loaded machine
    (the test's own timeout bounds the total)."""
    prompts: list[str] = []
    finished, since = -1, time.monotonic()
    while time.monotonic() - since < stall_s:
        errors = _error_outputs(page)
        assert not errors, "a cell raised:\n" + "\n---\n".join(errors)
        prompts = page.evaluate(JS_PROMPTS)
        ran = sum(bool(re.fullmatch(r"\[\d+\]:", p)) for p in prompts)
        if prompts and ran == len(prompts) and page.evaluate(JS_KERNEL_IDLE):
            return prompts
        if ran > finished:
            finished, since = ran, time.monotonic()
        page.wait_for_timeout(500)
    raise AssertionError(
        f"no cell finished within {stall_s:.0f} s (cell {finished + 1} of {len(prompts)} still "
        f"running or not started); prompts: {prompts}"
    )


def _change_control(page) -> str:
    """Move the first `.hpclab-control` to another value; return what was done."""
    control = page.locator(CONTROL).first
    control.scroll_into_view_if_needed()
    select = control.locator("select")
    if select.count():  # Dropdown / Select
        options = select.first.locator("option")
        current = select.first.input_value()
        for i in range(options.count()):
            value = options.nth(i).get_attribute("value")
            if value != current:
                select.first.select_option(value=value)
                return f"dropdown -> option {i}"
        raise AssertionError("the .hpclab-control dropdown has only one option")
    readout = control.locator(".widget-readout")
    if readout.count() and readout.first.get_attribute("contenteditable") == "true":
        # Slider: type the max (or the min, if already at the max) into the readout, Enter.
        old = readout.first.inner_text().strip()
        handle = control.locator(".noUi-handle").first
        vmin, vmax = handle.get_attribute("aria-valuemin"), handle.get_attribute("aria-valuemax")
        target = vmax if old != _fmt(vmax) else vmin
        readout.first.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(_fmt(target))
        page.keyboard.press("Enter")
        return f"slider readout {old} -> {_fmt(target)}"
    handle = control.locator(".noUi-handle, input")
    if handle.count():
        handle.first.focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("Enter")
        return "keyboard ArrowRight on the control"
    raise AssertionError("found .hpclab-control but no slider, dropdown or input inside it")


def _log_console(page) -> str:
    """Best effort: open View → Show Log Console and return its text (widget callbacks' errors)."""
    try:
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^View$")).click()
        page.locator(".lm-Menu-item", has_text=re.compile(r"^Show Log Console")).first.click()
        panel = page.locator(".jp-LogConsolePanel")
        panel.first.wait_for(timeout=5000)
        page.wait_for_timeout(500)
        return panel.first.inner_text()[-3000:] or "(empty)"
    except Exception as exc:  # diagnostics only
        return f"(could not read the Log Console: {exc!r})"


def _live_figures_drawn(page) -> tuple[int, int]:
    """(live figure areas on the page, how many of them show a plotly plot with data)."""
    return page.evaluate(
        """(sel) => {
          const areas = Array.from(document.querySelectorAll(sel));
          const drawn = a => {  // an svg alone is not enough: a blank plot has one too
            const p = a.querySelector('.js-plotly-plot');
            return p && p.querySelector('.main-svg') && p.data && p.data.length > 0;
          };
          return [areas.length, areas.filter(drawn).length];
        }""",
        LIVE_FIGURES,
    )


def _save_and_reload(page, rel: str) -> None:
    """Save the notebook (outputs and widget views), reload the page, wait for the kernel."""
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)
    page.reload(wait_until="domcontentloaded")
    page.wait_for_selector(f"{NOTEBOOK_PANEL} .jp-Notebook", timeout=60_000)
    _wait_kernel_idle(page, KERNEL_IDLE_TIMEOUT_S)


def _assert_stored_outputs(notebook: Path, server, rel: str) -> None:
    """The outputs the chapter stores for checking came out the same here (what nbval checks;
    see stored_outputs.py), on the copy saved before the reload."""
    saved = server.root / rel
    wait_saved(saved)
    bad = mismatches(notebook, saved)
    assert not bad, f"{rel}: stored outputs changed:\n" + "\n".join(bad)


def _wait_live_figures(page, expected: int, timeout_s: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    got = _live_figures_drawn(page)
    while got[1] < expected and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        got = _live_figures_drawn(page)
    return got


def _reload_and_wait_drawn(page, rel: str, drawn: int) -> tuple[int, int]:
    """Save, reload, and wait until ``drawn`` live figures draw again; returns what
    :func:`_live_figures_drawn` says then.

    On a loaded machine JupyterLab's widget manager at times loses one widget while restoring
    them from the kernel after a reload (chapter 06, in CI and in one of four runs beside
    other work): its output said "Error displaying widget: model not found"
    though the kernel held the widget and answered the manager's ``request_states`` with every
    model (checked with a kernel client: all 73 of chapter 06's in 0.07 s). That loss is the
    page's, not the kernel's; a student's remedy is another reload, and only with that message
    on the page the test reloads once more. A figure that does not draw again for any other
    reason, or twice, fails."""
    _save_and_reload(page, rel)
    got = _wait_live_figures(page, drawn, RELOAD_DRAW_TIMEOUT_S)
    if got[1] < drawn and page.get_by_text("Error displaying widget: model not found").count():
        print(f"{rel}: a widget model was lost by the page's restore; reloading once more")
        _save_and_reload(page, rel)
        got = _wait_live_figures(page, drawn, RELOAD_DRAW_TIMEOUT_S)
    return got


def _screenshot(page, name: str) -> None:
    """For review: the page, then every output holding a plot, a widget or a table."""
    if not SCREENSHOTS:
        return
    out = Path(SCREENSHOTS)
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"{name}.png"))
    outputs = page.locator(
        ".jp-Cell-outputArea:has(.js-plotly-plot), .jp-Cell-outputArea:has(.jupyter-widgets),"
        " .jp-Cell-outputArea:has(table), .jp-Cell-outputArea:has(.hpclab-figure)"
    )
    for i in range(outputs.count()):
        try:
            outputs.nth(i).screenshot(path=str(out / f"{name}-{i:02d}.png"), timeout=10_000)
        except Exception:  # review aid only: a detached output is skipped
            continue


def _fmt(value: str | None) -> str:
    """aria values are floats as strings ("10.0"); IntSlider wants "10"."""
    if value is None:
        return ""
    f = float(value)
    return str(int(f)) if f.is_integer() else value


def _open_run_all_and_check(page, server, rel: str, timings: dict, t0: float) -> list[str]:
    """Open the notebook, Run All, and check: every cell ran, no traceback in any output, a
    widget and a plotly plot rendered. Returns the cells' prompts."""
    page.goto(server.url(f"/lab/tree/{rel}"), wait_until="domcontentloaded")
    page.wait_for_selector(f"{NOTEBOOK_PANEL} .jp-Notebook", timeout=60_000)
    _wait_kernel_idle(page, KERNEL_IDLE_TIMEOUT_S)
    timings["lab_ready_s"] = time.monotonic() - t0
    _run_all(page)
    prompts = _wait_all_executed(page, CELL_STALL_TIMEOUT_S)
    timings["run_all_s"] = time.monotonic() - t0
    errors = _error_outputs(page)
    assert not errors, "an output shows an error:\n" + "\n---\n".join(errors)
    assert page.locator(WIDGET).count() > 0, "no ipywidgets widget rendered"
    page.wait_for_selector(f"{PLOT} .main-svg", state="attached", timeout=30_000)
    return prompts


@pytest.mark.parametrize("notebook", list(_params()))
def test_run_all_and_interact(notebook: Path, lab_factory, browser_page):
    t0 = time.monotonic()
    server, rel = lab_factory(notebook)
    timings: dict[str, float] = {}
    with browser_page(server) as (page, console):
        page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
        prompts = _open_run_all_and_check(page, server, rel, timings, t0)

        assert page.locator(CONTROL).count() > 0, (
            f"{rel}: no widget with CSS class 'hpclab-control' (convention: the notebook's "
            "interactive control calls .add_class('hpclab-control'))"
        )
        figure = FIGURE
        if not page.locator(FIGURE).count():  # fall back to the last plot on the page
            page.locator(PLOT).last.evaluate("el => el.classList.add('hpclab-test-target')")
            figure = ".hpclab-test-target"
        before = page.evaluate(JS_PLOT_DATA, figure)
        assert before is not None, f"plot {figure!r} has no plotly data"
        action = _change_control(page)

        after = before
        deadline = time.monotonic() + PLOT_CHANGE_TIMEOUT_S
        while after == before and time.monotonic() < deadline:
            page.wait_for_timeout(250)
            after = page.evaluate(JS_PLOT_DATA, figure)
        assert after != before, (
            f"plot data did not change within {PLOT_CHANGE_TIMEOUT_S} s after {action}. "
            f"JupyterLab's Log Console (where callback exceptions land) says:\n{_log_console(page)}"
        )
        errors = _error_outputs(page)
        assert not errors, "the control's callback raised:\n" + "\n---\n".join(errors)
        _screenshot(page, f"{notebook.stem}-run")

        # a browser reload with the kernel alive: every live figure draws again, still live
        areas, drawn = _live_figures_drawn(page)
        got = _reload_and_wait_drawn(page, rel, drawn)
        _screenshot(page, f"{notebook.stem}-reload")
        _assert_stored_outputs(notebook, server, rel)
        assert drawn > 0 and got[1] >= drawn, (
            f"after a reload {got[1]} of {got[0]} live figures drew again (before: {drawn} of "
            f"{areas}); console:\n" + "\n".join(console[-20:])
        )
        before = page.evaluate(JS_PLOT_DATA, FIGURE)
        action2 = _change_control(page)
        after = before
        deadline = time.monotonic() + PLOT_CHANGE_TIMEOUT_S
        while after == before and time.monotonic() < deadline:
            page.wait_for_timeout(250)
            after = page.evaluate(JS_PLOT_DATA, FIGURE)
        assert after != before, f"after the reload, {action2} did not redraw the figure"
        clicked = click_first_panel(page, notebook.stem)  # its Run button, after the reload
        timings["total_s"] = time.monotonic() - t0
        print(f"{rel}: {len(prompts)} code cells; {action}; plot {figure!r}; {clicked}; reload: "
              f"{got[1]} live figures drew again; timings {timings}")  # fmt: skip


CHAPTERS = sorted(p for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if p != NOTEBOOK)


# Half the chapters here, half in test_lab_chapters.py: with `pytest -n 2 --dist loadfile`
# (make test) each file runs on its own worker, and these are the longest tests.
@pytest.mark.parametrize("notebook", CHAPTERS[0::2], ids=lambda p: p.stem)
def test_every_chapter_runs_clean_in_the_browser(notebook: Path, lab_factory, browser_page):
    check_chapter_in_browser(notebook, lab_factory, browser_page)


def check_chapter_in_browser(notebook: Path, lab_factory, browser_page):
    """A chapter as a student opens it: Run All in JupyterLab, no traceback in any output, its
    widgets and plotly figures render, and they draw again after a save and a page reload."""
    t0 = time.monotonic()
    server, rel = lab_factory(notebook)
    timings: dict[str, float] = {}
    with browser_page(server) as (page, _console):
        prompts = _open_run_all_and_check(page, server, rel, timings, t0)
        _screenshot(page, f"{notebook.stem}-run")
        areas, drawn = _live_figures_drawn(page)
        got = _reload_and_wait_drawn(page, rel, drawn)
        _screenshot(page, f"{notebook.stem}-reload")
        _assert_stored_outputs(notebook, server, rel)
        assert got[1] >= drawn, (
            f"after a reload {got[1]} of {got[0]} live figures drew again (before: {drawn})"
        )
        # a control of the first panel changed and its Run button pressed, on the reloaded page
        clicked = click_first_panel(page, notebook.stem)
        timings["clicked_s"] = time.monotonic() - t0
        print(f"{rel}: {len(prompts)} code cells; {clicked or 'no panel'}; {drawn} of {areas} "
              f"live figures drawn, {got[1]} after a reload; timings {timings}")  # fmt: skip

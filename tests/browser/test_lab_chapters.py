"""The other half of the chapters in the browser (see test_lab.py; a file of its own so that
``pytest -n 2 --dist loadfile`` runs the two halves on two workers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lab import CHAPTERS, check_chapter_in_browser

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]  # as test_lab.py's


@pytest.mark.parametrize("notebook", CHAPTERS[1::2], ids=lambda p: p.stem)
def test_every_other_chapter_runs_clean_in_the_browser(notebook: Path, lab_factory, browser_page):
    check_chapter_in_browser(notebook, lab_factory, browser_page)

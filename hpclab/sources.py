"""The slide decks the course draws on, and the one way to cite them (every chapter).

In notebooks, legends, tables and CLI help a deck is cited by its short form, ``Guan 2019``; a
bundled reference's ``source`` (``hpclab/references/*.json``) is ``"Guan 2019: " +
DECKS["Guan 2019"] + ", slide '...'"``; the chapter's closing "Sources" cell lists each deck it
uses as ``- **Guan 2019**: <DECKS["Guan 2019"]>``, then the other published sources it uses
(papers, datasheets, benchmarks). ``tests/test_sources.py`` holds every place to this.
"""

from __future__ import annotations

DECKS: dict[str, str] = {
    "Mao 2015": 'Fei Mao, "Deep Learning on SHARCNET: From CPU to GPU cluster", SHARCNET (c. 2015)',
    "Guan 2019": (
        'Weiguang Guan, "Leveraging HPC to Accelerate Machine Learning", '
        "SHARCNET/Compute Canada (2019)"
    ),
    "Fox et al. 2015": (
        'G. Fox, J. Dongarra, A. Ng et al., "RaPyDLI: Rapid Prototyping HPC Environment for '
        'Deep Learning", NSF XPS PI meeting (June 2015)'
    ),
    "Mao 2017": 'Fei Mao, "Deep Learning on SHARCNET: Best Practices", SHARCNET (2017)',
    "Nakayama 2017": (
        'Kotaro Nakayama (Matsuo lab, U. Tokyo), "Chap. 05 Deep Learning & HPC", lecture (c. 2017)'
    ),
}

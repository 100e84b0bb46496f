"""Sources as a course cites them (DESIGN.md, "Sources"): a student never reads "seed 001" for a
slide deck, in a notebook, a reference's source, the CLI's help and list, or a plot; decks are
cited as *author year* (``hpclab.sources.DECKS``) and every chapter notebook ends with a Sources
cell that lists, with author and title, each deck it cites. An RNG seed is not a deck."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpclab import experiments
from hpclab.cli import main
from hpclab.results import load_reference, reference_names
from hpclab.sources import DECKS

ROOT = Path(__file__).resolve().parents[1]
# "seed 001", "Seed 004's", "seed001_table", "seeds 000", "the seeds", "the seed's": a deck
# named by its file, also across a line break ("seed\n004's"). Three digits with a leading 0, so
# "seed 0", "seed=42", "seed 1234" pass.
DECK_WORDS = re.compile(r"\bseeds?[\s_-]?0\d\d(?!\d)|\bthe\s+seeds\b|\bthe\s+seed's\b", re.I)
NOTEBOOKS = sorted(
    p
    for d in ("notebooks", "solutions", "exercises")
    for p in (ROOT / d).glob("[0-9][0-9]_*.ipynb")
)


def _hits(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 40] for m in DECK_WORDS.finditer(text)]


def test_the_pattern_tells_a_deck_from_an_rng_seed():
    for deck in ("seed 001's tables", "Seed 004 (Chap. 05)", "seed001_table()", "seed-003",
                 "the seeds give", "The seed's factors", "reference: seed 002, Caffe",
                 "(seed\n004's speed tip", "and seed\n001's workloads"):  # fmt: skip
        assert _hits(deck), deck
    for rng in ("seed=0", "seed 0", "seed: int = 0", "seed + epoch", "manual_seed(1234)",
                "seeds 0..3", "with seed 1234", "seed 0123", "seeded by `seed + epoch`"):  # fmt: skip
        assert not _hits(rng), rng


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebooks_cite_decks_by_author(path):
    assert not _hits(path.read_text())  # cells and stored outputs, as stored
    # each cell's text joined, so a name split over two source lines is found too
    cells = json.loads(path.read_text())["cells"]
    texts = ["".join(c["source"]) + json.dumps(c.get("outputs", [])) for c in cells]
    assert not [h for t in texts for h in _hits(t)]


def test_library_docs_and_references_cite_decks_by_author():
    files = [*(ROOT / "hpclab").rglob("*.py"), *(ROOT / "hpclab" / "references").glob("*.json")]
    files += [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    found = {str(f.relative_to(ROOT)): _hits(f.read_text()) for f in files}
    assert not {f: h for f, h in found.items() if h}


@pytest.mark.parametrize("name", reference_names())
def test_reference_sources_give_author_and_title(name):
    ref = load_reference(name)
    source = ref.env["source"]
    decks = [short for short in DECKS if source.startswith(f"{short}: ")]
    if decks:  # a deck: "Guan 2019: Weiguang Guan, "Leveraging HPC ...", ..., slide ..."
        (short,) = decks
        assert source.startswith(f"{short}: {DECKS[short]}")
        # the file says which deck it holds: guan2019_cpu_threads.json
        assert name.startswith(short.split()[0].lower() + short.split()[-1] + "_")
    else:  # another published source, named in full
        assert not re.match(r"^[a-z]+\d{4}_", name) and len(source) > 40
    assert not _hits(json.dumps(ref.env)) and all(r["source"] == source for r in ref.records)


def test_cli_help_and_list_cite_decks_by_author(capsys):
    assert main(["run", "--list"]) == 0
    for name in experiments.registry():
        assert main(["run", name, "--help"]) == 0
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "ch06" in text and "--workload" in text  # it printed the list and every help
    assert "guan2019" in text  # scaling-model's workload names say whose table they are
    assert not _hits(text)


# The smallest runs that still draw every reference a plot can carry (the live part is beside
# the point here), so the whole sweep takes a few seconds.
SMALL = {
    "ddp": {"ranks": 1, "steps": 1, "warmup": 1, "baseline": False},
    "loader": {"format": ("memmap",), "samples": 64, "batch_size": (8,), "workers": (0,)},
    "ops": {"device": "cpu", "ops": ("pool",), "repeat": 1},
    "staging": {"files": 10},
    "train-throughput": {
        "model": "tiny",
        "data": "digits",
        "batch_size": (8,),
        "threads": (1,),
        "steps": 1,
    },
}


def _figure_text(name: str) -> str:
    exp = experiments.registry()[name]
    if exp.chapter == "07":
        # A Slurm job only to draw a legend took 15-40 s a case: the chapter's recorded run
        # (what its notebook plots without a Slurm) has the same records. The live runs are
        # tests/test_cluster_{jobs,ddp,requeue}.py's, and solutions/07_cluster.ipynb plots them.
        from hpclab.cluster.tiers import recorded

        result = recorded(name)
        assert result.experiment == name and result.records
    else:
        result = experiments.run(name, **SMALL.get(name, {}))
    return json.dumps(exp.plot(result).to_plotly_json(), default=str)


# The experiments whose plots draw bundled reference figures (a reference's "experiment", and
# the scaling model's overlay), on a quick run.
PLOTTED = sorted({load_reference(n).experiment for n in reference_names()} | {"scaling-model"})


@pytest.mark.parametrize("name", PLOTTED)
def test_plot_legends_cite_decks_by_author(name):
    text = _figure_text(name)
    assert not _hits(text)
    decks = {load_reference(n).env["source"].split(":")[0] for n in reference_names()}
    drawn = {s for s in DECKS if s in text}
    if name in ("ddp", "loader", "ops", "staging", "train-throughput", "scaling-model"):
        assert drawn & decks, f"{name}'s plot draws a deck's figures without naming the deck"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_chapter_ends_with_a_sources_cell_listing_its_decks(path):
    cells = json.loads(path.read_text())["cells"]
    last = "".join(cells[-1]["source"])
    assert cells[-1]["cell_type"] == "markdown" and last.startswith("## Sources\n"), path.name
    body = "\n".join("".join(c["source"]) for c in cells[:-1])
    for short, full in DECKS.items():
        if re.search(rf"\b{re.escape(short)}\b", body):
            assert f"- **{short}**: {full}" in last, f"{path.name} cites {short} without listing it"
    listed = re.findall(r"^- \*\*(.+?)\*\*", last, re.M)
    assert set(listed) <= set(DECKS), f"unknown deck in {path.name}'s Sources: {listed}"
    assert len(last.splitlines()) > 3  # at least one source under the heading

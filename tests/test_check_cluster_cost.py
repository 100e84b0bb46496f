"""Chapter 07's run-cost exercise (e), the storage tiers and the container recipe (no Slurm).

Cost: well under a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpclab.check.cluster import check_run_cost
from hpclab.cluster import profiles
from hpclab.cluster.costs import MAO2015, PRICE, run_cost_usd, train_hours
from hpclab.cluster.storage_tiers import SHARCNET_2017, storage, tiers_table
from hpclab.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_mao_2015_alexnet_arithmetic_and_the_bill():
    # 1.2e6 x 90 / 5120 x 26.5 s = 559 000 s: the deck's "160 hours for 90 epochs"
    assert train_hours(**MAO2015) == pytest.approx(155.27, abs=0.01)
    # GPU-hours do not shrink with more GPUs: at efficiency 1 the bill is the one-GPU bill
    one = run_cost_usd(100.0, 1, 1.0, PRICE["usd_per_gpu_hour"])
    assert run_cost_usd(100.0, 8, 1.0, PRICE["usd_per_gpu_hour"]) == pytest.approx(one)
    assert run_cost_usd(100.0, 8, 0.5, 2.0) == pytest.approx(400.0)
    assert PRICE["as_of"] and PRICE["source"].startswith("Mercatus")


def test_run_cost_check_accepts_the_solution_and_names_plausible_mistakes():
    assert check_run_cost(train_hours, run_cost_usd)
    seconds = check_run_cost(lambda n, e, i, s: n * e / (i / s), run_cost_usd)
    assert not seconds and "that is seconds; divide by 3600" in seconds.message
    one_epoch = check_run_cost(lambda n, e, i, s: n / (i / s) / 3600, run_cost_usd)
    assert not one_epoch and "one epoch" in one_epoch.message
    every_gpu = check_run_cost(train_hours, lambda h, g, e, p: h * g * p / e)
    assert not every_gpu and "billed the one-GPU time on every GPU" in every_gpu.message
    no_eff = check_run_cost(train_hours, lambda h, g, e, p: h * p)
    assert not no_eff and "lost efficiency is paid" in no_eff.message
    other = check_run_cost(train_hours, lambda h, g, e, p: 1.0)
    assert not other and "expected 155.3 / (8 x 0.9) wall hours" in other.message
    assert not check_run_cost(3, 4)


def test_every_bundled_profile_has_dated_sourced_storage_tiers():
    for site in profiles.names():
        entry = storage(site)
        tiers = [t["tier"] for t in entry["tiers"]]
        assert "home" in tiers and "node-local" in tiers, site
        assert entry["source"], site
        assert entry["as_of"] or site == "generic", site
        table = tiers_table(site)
        assert table.loc["node-local", "purged"] == "at job end"
    graham = tiers_table("graham_2019")  # Guan 2019's table
    assert graham.loc["scratch", "purged"] == "after 60 days"
    assert graham.loc["scratch", "quota"] == "20 TB" and graham.loc["scratch", "files"] == "1M"
    assert graham.loc["home", "backed up"] == "yes" and graham.loc["scratch", "backed up"] == "no"
    assert tiers_table(SHARCNET_2017).loc["home", "quota"] == "10 GB"
    with pytest.raises(ConfigError, match="unknown"):
        storage("nowhere")


def test_the_apptainer_definition_installs_this_package_over_the_image_torch():
    text = (ROOT / "deploy" / "apptainer" / "hpclab.def").read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "Bootstrap: docker" and lines[1].startswith("From: pytorch/pytorch:")
    header = [ln.split()[0] for ln in lines if ln.startswith("%")]
    assert header[:2] == ["%files", "%post"] and "%test" in header
    assert "pip install --no-cache-dir /opt/hpclab" in text

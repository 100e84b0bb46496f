"""environment.yml and pyproject.toml must name the same dependencies (they cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; the library itself needs 3.10

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _env_pip_specs() -> list[str]:
    specs, inside = [], False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("- pip:"):
            inside = True
            continue
        if inside and stripped.startswith("- "):
            specs.append(stripped[2:].strip())
        elif inside and stripped and not stripped.startswith("#"):
            inside = False
    return specs


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(s): s.replace(" ", "") for s in project["dependencies"]}
    in_env = {_name(s): s.replace(" ", "") for s in _env_pip_specs() if not s.startswith("-e")}
    assert in_env == declared, (
        f"only in environment.yml: {sorted(set(in_env) - set(declared))}; "
        f"only in pyproject.toml: {sorted(set(declared) - set(in_env))}; "
        f"different specs: {sorted(k for k in declared if k in in_env and in_env[k] != declared[k])}"
    )
    assert "-e ." in _env_pip_specs(), "environment.yml must install the project itself"


def test_torch_is_a_range_and_ci_pins_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_spec = next(s for s in project["dependencies"] if _name(s) == "torch")
    assert "==" not in torch_spec, "clusters bring their own CUDA torch: keep a range"
    # The lent GPU machines have torch 2.11: the range must admit it.
    assert (
        re.search(r">=\s*2\.(\d+)", torch_spec)
        and int(re.search(r">=\s*2\.(\d+)", torch_spec)[1]) <= 11
    )
    assert "torch==2.13.0" in (ROOT / ".ci" / "run").read_text()
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()

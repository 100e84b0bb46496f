# hpclab: `make lab` opens the workbook, `make test` runs every test (what .ci/run calls).
PYTHON ?= python3
VENV ?= .venv
# CI and laptops take the CPU wheel; on a GPU cluster install the site's torch first
# (pyproject.toml keeps a range, so pip leaves it alone) or override: make TORCH_SPEC=... lab
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# The local Slurm's daemons need root: sudo for a normal user where there is one, else nothing.
SLURM_SUDO ?= $(shell [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null && echo sudo)
# Its own stamp: scripts/lab.sh installs without the test extras and stamps .hpclab-installed.
STAMP := $(VENV)/.hpclab-test-installed
NOTEBOOKS := $(wildcard notebooks/[0-9][0-9]_*.ipynb) $(wildcard solutions/[0-9][0-9]_*.ipynb)

.PHONY: install lab test lint format notebooks exercises benchmarks kernel clean slurm-up slurm-down

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# scripts/lab.sh creates the venv and installs what is missing (torch: $(TORCH_SPEC)), then
# serves LAB_ROOT (default: the repository, so notebooks/, exercises/ and solutions/ show).
LAB_ROOT ?=
lab:
	HPCLAB_VENV=$(VENV) HPCLAB_TORCH_SPEC="$(TORCH_SPEC)" bash scripts/lab.sh $(LAB_ROOT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The chapters under notebooks/ run once: in the browser test (Run All in JupyterLab; the outputs
# they store for checking are compared there as nbval compares them, tests/browser/stored_outputs.py).
# Without Chromium that test skips, and nbval runs them instead. The solutions stay under nbval.
CHROMIUM ?= $(or $(HPCLAB_CHROMIUM),/usr/bin/chromium)
NBVAL_CHAPTERS := $(if $(wildcard $(CHROMIUM)),,notebooks)

# Everything CI checks; the last thing printed is pytest's summary line. Chapter 07's notebook and
# tests use the local Slurm: started here (as root; elsewhere they say there is none) and stopped
# afterwards whatever pytest's outcome.
test: install lint
	$(BIN)/hpclab exercises check
	$(SLURM_SUDO) bash scripts/local_slurm.sh start || [ "$$HPCLAB_REQUIRE_SLURM" != 1 ]
	CI=true HPCLAB_QUICK=1 PLOTLY_RENDERER=plotly_mimetype $(BIN)/python -m pytest \
		tests $(NBVAL_CHAPTERS) solutions -m "not gpu" -p no:cacheprovider -n 2 --dist loadfile --durations=40 \
		--nbval-lax --nbval-sanitize-with tests/sanitize.cfg \
		--ignore=tests/browser/demo_widget.ipynb; \
	rc=$$?; $(SLURM_SUDO) bash scripts/local_slurm.sh stop; exit $$rc

# Chapter 07's local Slurm (munged, slurmctld, two slurmd nodes on loopback; needs root):
# eval "$$(scripts/local_slurm.sh env)" points sbatch/squeue at it.
slurm-up:
	$(SLURM_SUDO) bash scripts/local_slurm.sh start

slurm-down:
	$(SLURM_SUDO) bash scripts/local_slurm.sh stop

# On a GPU node: the GPU-marked tests.
test-gpu: install
	$(BIN)/python -m pytest tests -m gpu

# Re-execute notebooks in quick mode and keep only nbval-checked outputs; rebuild exercises.
notebooks: install
	$(BIN)/hpclab notebooks refresh $(NOTEBOOKS)
	$(BIN)/hpclab exercises build

exercises: install
	$(BIN)/hpclab exercises build

benchmarks: install
	for b in benchmarks/[!_]*.py; do $(BIN)/python $$b | tail -n 3; done

# For JupyterHub: make this environment a kernel named "hpclab" in your user's kernel list.
kernel: install
	$(BIN)/python -m ipykernel install --user --name hpclab --display-name "Python (hpclab)"

clean:
	rm -rf test-artifacts .pytest_cache .ruff_cache

# The Attention Ledger: two commands on a fresh machine (Python 3.11 and make).
#   make book   installs into .venv if needed, builds _build/html
#   make test   installs if needed, runs ruff, pytest (unit, property, nbval) and the strict book build
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is installed first, and only when the venv has none: the CPU build on
# this project's machines. Elsewhere, point TORCH_INSTALL at the wheel you want.
TORCH_INSTALL ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg
export PYTHONHASHSEED := 0
export OMP_NUM_THREADS ?= 2

.PHONY: install book test lint unit nbval book-strict browser notebooks formulas lab bench clean

install: $(STAMP)

# constraints.txt pins every other package (the book's look included) to the versions checked here
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_INSTALL)"
	$(PIP) install -q -c constraints.txt -r requirements-dev.txt -e .
	@touch $@

# Sphinx skips copying _static when no page is out of date: a changed stylesheet, extension or
# config rebuilds every page (--all)
BOOK_INPUTS_NEWER = $(shell find book/_static book/_ext book/_extra _config.yml _toc.yml \
  -newer _build/.book-built 2>/dev/null | head -1)

book: $(STAMP)
	$(BIN)/jupyter-book build . --keep-going $(if $(BOOK_INPUTS_NEWER),--all)
	@touch _build/.book-built
	@echo "open _build/html/index.html"

lint: $(STAMP)
	$(BIN)/ruff check .

unit: $(STAMP)
	$(BIN)/pytest -q tests --ignore=tests/browser

nbval: $(STAMP)
	$(BIN)/pytest -q $(NBVAL) $(PYTEST_ARGS) notebooks

book-strict: $(STAMP)
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	@touch _build/.book-built

# drives Debian's Chromium over the built book (skips without it, fails without it under CI=true)
browser: $(STAMP)
	$(BIN)/pytest -q tests/browser

# `make test`: ruff, the strict book build (seconds), then one pytest run of everything (unit and
# property tests, nbval, JupyterLab, the built pages) on three workers with one thread each: they
# share two cores, and the browser tests spend much of their time waiting. conftest.py keeps a
# notebook's cells (and each file or page whose tests share a costly fixture) on one worker, in
# order, and starts the longest chains first
test: lint book-strict
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -n 3 --dist loadgroup --no-loadscope-reorder $(NBVAL) notebooks tests

# the widgets' formulas, printed by SymPy from attn_core/formulas.py into attn_core/static/formulas.js
# (tests/test_formulas.py checks it is current)
formulas: $(STAMP)
	$(BIN)/python -c "from attn_core import formulas; formulas.write_generated()"

# re-execute every notebook in place (outputs and widget state written by nbclient); before: the Colab
# cell and the collapsed cells' labels, after: the numbers the prose quotes (book/_ext/sync_notebooks.py).
# NB=notebooks/05_memory_ledger.ipynb re-executes one chapter
notebooks: formulas
	$(BIN)/python book/_ext/sync_notebooks.py --cells $(NB)
	$(BIN)/python -m jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.kernel_name=python3 $(or $(NB),notebooks/*.ipynb)
	$(BIN)/python book/_ext/sync_notebooks.py $(NB)

# benchmark tables (ratios measured side by side in one run; not tests). The headline is
# bench/linear_forms.py, under glibc's default malloc in a fresh process, as a reader's notebook runs;
# bench/run.py writes bench/results.json for the page "Measured on this machine".
bench: $(STAMP)
	$(BIN)/python bench/linear_forms.py --json bench/linear_forms.json
	$(BIN)/python bench/run.py
	$(BIN)/python bench/flash.py
	$(BIN)/python bench/training.py
	$(BIN)/python bench/parallel.py

# JupyterLab at the repository root (chapters link to book/ pages), opened on notebooks/;
# --allow-root where it runs as root, as in a container
lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/notebooks \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf _build

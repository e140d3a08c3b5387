# fairseq-ext: `make demo` and `make test` are all a fresh clone needs.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo lint test test-fast clean-venv

install: $(STAMP)

# fairseq is ve-fairseq 0.12.3 with patches/ve-fairseq-0.12.3.patch applied (README, "Install").
FAIRSEQ_WHEEL_DIR := build/fairseq-wheel

# Re-runs only when a requirement file, the fairseq patch or setup.py changed: a second
# `make install` does nothing.
$(STAMP): requirements.txt requirements-fairseq.txt constraints.txt setup.py \
		patches/ve-fairseq-0.12.3.patch scripts/build_fairseq_wheel.sh $(wildcard fairseq_ext/csrc/*)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements.txt -c constraints.txt
	rm -rf $(FAIRSEQ_WHEEL_DIR)
	PYTHON=$(PY) scripts/build_fairseq_wheel.sh $(FAIRSEQ_WHEEL_DIR)
	$(PIP) install -q --no-deps --force-reinstall $(FAIRSEQ_WHEEL_DIR)/ve_fairseq-*.whl
	$(PIP) install -q --no-deps --no-build-isolation --use-pep517 -e .
	$(PY) -c "import fairseq, fairseq_ext, torch; print('fairseq', fairseq.__version__, '| torch', torch.__version__)"
	@touch $@

demo: install
	$(PY) scripts/demo.py

lint: install
	$(PY) -m ruff check .

# The full suite, as CI runs it (lint first).
test: lint
	$(PY) -m pytest -q tests $(PYTEST_ARGS)

# Everything but the tests marked slow (real fairseq-train runs, recipe runs, compiles): a few
# minutes, for the edit-test loop.
test-fast: lint
	$(PY) -m pytest -q -m "not slow" tests $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)

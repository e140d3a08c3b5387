# fairseq-ext: `make demo` and `make test` are all a fresh clone needs.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test clean-venv

install: $(STAMP)

# Re-runs only when a requirement file or setup.py changed: a second `make install` does nothing.
$(STAMP): requirements.txt requirements-fairseq.txt constraints.txt setup.py $(wildcard fairseq_ext/csrc/*)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements.txt -c constraints.txt
	$(PIP) install -q --no-deps -r requirements-fairseq.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import fairseq, fairseq_ext, torch; print('fairseq', fairseq.__version__, '| torch', torch.__version__)"
	@touch $@

demo: install
	$(PY) scripts/demo.py

test: install
	$(PY) -m pytest -q tests $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)

# fairseq-ext: `make demo` and `make test` are all a fresh clone needs.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
# The optional extras, `hf` (requirements-hf.txt) and `sharding` (requirements-sharding.txt),
# and CUDA's compiler as wheels (requirements-nvcc.txt): the tests need them, install and demo
# do not.
EXTRAS_STAMP := $(VENV)/.installed-extras
PYTEST_ARGS ?=
# The suite runs on this many pytest-xdist processes, one torch thread each (most tests drive
# one single-threaded fairseq subprocess at a time, so 2 processes halve the wall time on CI's 2
# cores); PYTEST_WORKERS=0 runs it in this process. Work stealing: a worker that runs out takes
# half of the other's queue, so neither ends alone with the long tests (tests/conftest.py starts
# those first; docs/testing.md).
PYTEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist worksteal)

.PHONY: install demo lint test test-fast test-fresh clean-venv

install: $(STAMP)

# fairseq is ve-fairseq 0.12.3 with the patch series patches/series applied (README, "Install").
FAIRSEQ_WHEEL_DIR := build/fairseq-wheel

# Re-runs only when a requirement file, the fairseq patch or setup.py changed: a second
# `make install` does nothing.
$(STAMP): requirements.txt requirements-fairseq.txt constraints.txt setup.py \
		patches/series $(wildcard patches/*.patch) scripts/build_fairseq_wheel.sh $(wildcard fairseq_ext/ops/csrc/*)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements.txt -c constraints.txt
	rm -rf $(FAIRSEQ_WHEEL_DIR)
	PYTHON=$(PY) scripts/build_fairseq_wheel.sh $(FAIRSEQ_WHEEL_DIR)
	$(PIP) install -q --no-deps --force-reinstall $(FAIRSEQ_WHEEL_DIR)/ve_fairseq-*.whl
	$(PIP) install -q --no-deps --no-build-isolation --use-pep517 -e .
	$(PY) -c "import fairseq, fairseq_ext, torch; print('fairseq', fairseq.__version__, '| torch', torch.__version__)"
	@touch $@

$(EXTRAS_STAMP): $(STAMP) requirements-hf.txt requirements-sharding.txt requirements-nvcc.txt \
		constraints.txt
	$(PIP) install -q -r requirements-hf.txt -r requirements-sharding.txt \
		-r requirements-nvcc.txt -c constraints.txt
	@touch $@

# make demo COMPARE=docs/demo/summary.json: compare the fresh run's figures with the committed
# reference when done (exit 1 past the tolerance; docs/demo.md, "Reproducing the figures")
demo: install
	$(PY) scripts/demo.py $(if $(COMPARE),--compare $(COMPARE))

lint: install
	$(PY) -m ruff check .

# The full suite, as CI runs it (lint first), but for the tests marked heavy (inductor compiles,
# minutes each), those marked real_processes (exact resume, kills, the determinism repeats, an
# installed copy: every run a real process whether the fork server is on or off, so they run in
# `make test-fresh` exactly as they would here) and the lab's slow tests (marked lab: the demo,
# studies, fine-tuning stage, diagnosis, benchmarks, GPU suite): `make test-fresh` runs all three.
test: lint $(EXTRAS_STAMP)
	$(PYTEST) -m "not heavy and not real_processes and not lab" tests $(PYTEST_ARGS)

# Everything but the tests marked slow (real fairseq-train runs, recipe runs, compiles): a few
# minutes, for the edit-test loop.
test-fast: lint $(EXTRAS_STAMP)
	$(PYTEST) -m "not slow" tests $(PYTEST_ARGS)

# The tests marked slow, the heavy ones included, with the suite's fork server off
# (FAIRSEQ_EXT_TEST_ZYGOTE=0): every fairseq CLI, recipe and script a test starts is a real
# process, as a user's is (docs/testing.md, "Served runs"). CI runs it after `make test`.
ZYGOTE_OFF := FAIRSEQ_EXT_TEST_ZYGOTE=0
test-fresh: lint $(EXTRAS_STAMP)
	$(ZYGOTE_OFF) $(PYTEST) -m slow tests $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)

# The two commands of the README: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-slow test-all test-matrix test-lowest test-pythons torture docs bench clean etcd

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[openai]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,dev,etcd,metrics,docs,openai,thirdparty,mcp]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/tether demo

# The etcd tests need Debian's etcd-server; the suite starts its own clusters (tests/etcd_cluster.py).
etcd:
	@command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive sh -c \
	    'apt-get install -y -q etcd-server || (apt-get update -q && apt-get install -y -q etcd-server)' \
	  >/dev/null || echo "etcd-server could not be installed: the etcd tests will be skipped"

# The suite a person waits for (under 6 minutes on 2 cores): lint, format, types, and the
# tests on this Python in two workers, a 24-second slice of the fault campaign (a fresh seed,
# shown in the header) among them. The tests marked slow (each over ~8 s) are `test-slow`'s.
PYTEST_WORKERS ?= 2
test: $(VENV)/.installed-test etcd
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy --strict src
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not slow"

# The slow tests (randomized lives, SIGKILL bursts, a fresh venv, generated programs): CI runs
# them after `make test`, and so does `make test-all`.
test-slow: $(VENV)/.installed-test etcd
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m slow

# The slower matrix CI adds after `make test`: the tests again on the lowest dependency versions
# pyproject.toml allows and on every other supported Python this machine has (a missing one is
# named and skipped). Every phase runs, and each one's result is named at the end.
test-matrix:
	@failed=""; \
	$(MAKE) --no-print-directory test-lowest || failed="$$failed test-lowest"; \
	$(MAKE) --no-print-directory test-pythons || failed="$$failed test-pythons"; \
	if [ -n "$$failed" ]; then echo "test-matrix: failed:$$failed"; exit 1; fi; \
	echo "test-matrix: every phase passed"

# What CI runs: `make test`, the slow tests, then the matrix, every phase reported even when
# one fails.
test-all:
	@failed=""; \
	$(MAKE) --no-print-directory test || failed="$$failed test"; \
	$(MAKE) --no-print-directory test-slow || failed="$$failed test-slow"; \
	$(MAKE) --no-print-directory test-matrix || failed="$$failed test-matrix"; \
	if [ -n "$$failed" ]; then echo "test-all: failed:$$failed"; exit 1; fi; \
	echo "test-all: every phase passed"

# The whole fault campaign (ADR 0033): seeded, each failing seed printed with its replay command;
# then the SIGKILL bursts of exactly-once delivery at their full 20 rounds (5 in `make test`);
# then the deadlock detector's negative control (ADR 0038): 160 generated working programs and
# each hand-written one 20 times, with no false alarm allowed.
TORTURE_SEEDS ?= 6
TORTURE_STEPS ?= 600
torture: $(VENV)/.installed-test
	$(BIN)/python tests/torture/run.py --seeds $(TORTURE_SEEDS) --steps $(TORTURE_STEPS)
	TETHER_DELIVERY_ROUNDS=20 $(BIN)/python -m pytest -q tests/test_agentd_delivery.py -k sigkills
	$(BIN)/python tests/torture/control.py --seeds 10 --programs 16
	$(BIN)/python tests/torture/corpus.py --runs 3
	$(BIN)/python tests/torture/model.py --seeds 5 --seconds 40
	TETHER_SOUNDNESS_RUNS=20 $(BIN)/python -m pytest -q tests/test_testing_soundness.py -k working

OTHER_PYTHONS ?= 3.12 3.13

test-lowest: etcd
	[ -x .venv-lowest/bin/python ] || $(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/python -m pip install --quiet -c tests/lowest-versions.txt -e '.[test,etcd,metrics]'
	.venv-lowest/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS)

test-pythons: etcd
	@failed=""; for v in $(OTHER_PYTHONS); do \
	  py=""; \
	  for c in python$$v $$HOME/.pyenv/versions/$$v*/bin/python$$v; do \
	    if $$c -c '' 2>/dev/null; then py=$$c; break; fi; \
	  done; \
	  if [ -z "$$py" ]; then echo "python$$v is not on this machine: the suite is not run on it"; continue; fi; \
	  echo "the suite on $$($$py -V)"; \
	  if ( [ -x .venv-$$v/bin/python ] || $$py -m venv .venv-$$v ) && \
	     .venv-$$v/bin/python -m pip install --quiet -e '.[test,etcd,metrics]' && \
	     .venv-$$v/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS); \
	  then :; else failed="$$failed $$v"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "test-pythons: failed on Python$$failed"; exit 1; fi

docs: $(VENV)/.installed-test
	$(BIN)/mkdocs build --strict

bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/summary.py

clean:
	rm -rf $(VENV) .venv-lowest .venv-3.* site .mypy_cache .pytest_cache .ruff_cache .hypothesis

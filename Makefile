# The two commands of the README: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test bench clean etcd

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/tether demo

# The etcd tests need Debian's etcd-server; the suite starts its own clusters (tests/etcd_cluster.py).
etcd:
	@command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive sh -c \
	    'apt-get install -y -q etcd-server || (apt-get update -q && apt-get install -y -q etcd-server)' \
	  >/dev/null || echo "etcd-server could not be installed: the etcd tests will be skipped"

test: $(VENV)/.installed-test etcd
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy --strict src
	$(BIN)/python -m pytest

bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/summary.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis

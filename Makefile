# The two commands of the README. Both create or update .venv as needed.
#   make run   - install and start the gateway on its embedded default
#   make test  - install the test extras, then lint, type-check and run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
ARGS ?=

.PHONY: run test lint typecheck pytest bench docs lock clean

# The new virtualenv's pip is replaced by requirements/pip.lock's, checked against its hash.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --require-hashes -r requirements/pip.lock

# `make run`'s environment: the runtime with the shared-store extras, the embedded engine and its
# bundled model, every package from a hashed lockfile with --require-hashes, as the image's
# engine build installs them (engine.lock, model.lock). What compiles from source
# (llama-cpp-python, hnswlib, levergate) builds with --no-build-isolation against the build
# backends test-build.lock installs first: an isolated build would fetch them unverified.
# llama-cpp-python compiles here (~200 s with LLAVA off); the stamp re-runs the install when
# pyproject.toml or a lockfile changes. GGML_NATIVE=OFF builds for x86-64-v3 (AVX2, FMA, F16C)
# instead of -march=native: on a CPU with AMX (Xeon Sapphire Rapids and later) a native build
# runs ggml's AMX kernels, which crashed the bundled model's first decode here (SIGSEGV in
# ggml_backend_amx_mul_mat, 2026-12-04). pip reuses a wheel it built before whatever the flags:
# after a native build, `pip cache remove llama_cpp_python` first.
LOCAL_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
RUN_LOCKS := requirements/test-build.lock requirements/engine.lock requirements/model.lock
$(VENV)/.installed: pyproject.toml $(RUN_LOCKS) | $(BIN)/python
	$(PIP) install --quiet --require-hashes -r requirements/test-build.lock
	CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(PIP) install --quiet --require-hashes --no-build-isolation \
	  -r requirements/engine.lock
	$(PIP) install --quiet --require-hashes --no-deps -r requirements/model.lock
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $@

# `make test`'s environment, CI's included: every third-party package from the hashed lockfiles,
# installed with --require-hashes (`make lock` writes them; tests/packaging/test_lockfiles.py
# fails when they and pyproject.toml disagree). test.lock holds the test, local and embed extras
# (llama-cpp-python[server] is a real upstream for the e2e tests), compiled under engine.lock's
# pins, so the same packages as `make run`'s plus the test tools, built the same way.
TEST_LOCKS := requirements/test-build.lock requirements/test.lock requirements/model.lock
$(VENV)/.installed-test: pyproject.toml $(TEST_LOCKS) | $(BIN)/python
	$(PIP) install --quiet --require-hashes -r requirements/test-build.lock
	CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(PIP) install --quiet --require-hashes --no-build-isolation \
	  -r requirements/test.lock
	$(PIP) install --quiet --require-hashes --no-deps -r requirements/model.lock
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/levergate serve $(ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples
	$(BIN)/python scripts/check_size.py src tests benchmarks scripts examples

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy src tests examples

# Every core, one test file per worker (module fixtures such as the benchmark smoke runs stay in
# one process); PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= auto
pytest: $(VENV)/.installed-test
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(ARGS)

test: lint typecheck pytest

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/overhead.py

# The user guide and API reference (mkdocs.yml), strict, into build/docs.
docs: $(VENV)/.installed-test
	$(BIN)/python scripts/api_docs.py --out build/docs

# The hashed lockfiles, installed with --require-hashes: the container image's (Dockerfile: the
# runtime with the shared-store extras, the same plus the embedded engine, its model, and the
# build backends) and the virtualenvs' here (pip itself, and `make test`'s environment with its
# build backends), each agreeing with the ones before it on every package they share. Pins
# already in a file are kept; `make lock LOCK_ARGS=--upgrade` moves them.
LOCK_ARGS ?=
COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
	--custom-compile-command "make lock" $(LOCK_ARGS)
lock: $(VENV)/.installed-test
	$(COMPILE) pyproject.toml --extra redis --extra postgres -o requirements/runtime.lock
	$(COMPILE) pyproject.toml --extra redis --extra postgres --extra local --extra embed \
	  -c requirements/runtime.lock -o requirements/engine.lock
	$(COMPILE) requirements/model.in --no-deps -o requirements/model.lock
	$(COMPILE) requirements/build.in -o requirements/build.lock
	$(COMPILE) requirements/pip.in -o requirements/pip.lock
	$(COMPILE) requirements/test-build.in -c requirements/engine.lock -c requirements/build.lock \
	  -o requirements/test-build.lock
	$(COMPILE) pyproject.toml --extra test --extra local --extra embed -c requirements/engine.lock \
	  -c requirements/test-build.lock -o requirements/test.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

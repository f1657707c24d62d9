#!/usr/bin/env bash
# The GPU benches of issues 33 and 37 as one device call (a machine with CUDA torch for Python 3.12
# and no package index, such as this workplace's device machine).
#
#   bench/device_benches.sh prepare   # here: wheels orchard needs there (.whl/), SmolLM2's config and
#                                     # tokenizer without weights (.gpu/); both git-ignored via info/exclude
#   bench/device_benches.sh run       # there (carry .whl and .gpu): scale_bench on one GPU (1 process,
#                                     # + grad checkpointing, + LoRA; a 1.5 B random Llama), then
#                                     # serve_batch_bench batched vs one at a time on CUDA
# Figures land in $OUT (or ./device-out).
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
  for d in /.whl/ /.gpu/; do grep -qxF "$d" .git/info/exclude || echo "$d" >> .git/info/exclude; done
  pins=$(grep -iE "^(pydantic|pydantic_core|annotated-types|typing-inspection|typing_extensions|fastapi|starlette|uvicorn|jsonlines|websockets|gguf|transformers|peft|tokenizers|safetensors|huggingface_hub|httpx2|httpcore2|click|truststore|idna|anyio|regex)==" constraints.txt)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d .whl $pins
  .venv/bin/python bench/serve_batch_bench.py --export-skeleton .gpu/bench-skeleton
  ;;
run)
  OUT=${OUT:-./device-out}; mkdir -p "$OUT"
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ORCHARD_HOME=/tmp/orchard-home
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  timeout "${SCALE_T:-210}" python3 bench/scale_bench.py --random-model 2048,8192,24,32 \
    --tokenizer .gpu/bench-skeleton --skip-rl --steps 6 2>&1 | tee "$OUT/scale_bench.txt"
  timeout "${SERVE_T:-260}" python3 bench/serve_batch_bench.py --device cuda --model .gpu/bench-skeleton \
    --random-weights --levels 1,4,16,64 --max-batch 64 --max-tokens 32 --rounds 2 --threads 4 \
    --json "$OUT/serve_gpu.json" 2>&1 | tee "$OUT/serve_bench.txt"
  ;;
*) echo "usage: bench/device_benches.sh prepare|run" >&2; exit 2 ;;
esac

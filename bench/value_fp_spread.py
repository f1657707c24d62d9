"""How far the value model's feature rows move with the CPU's fp32 kernels, and what tolerance
tests/value/test_features.py may therefore ask for.

The pinned rows (tests/value/data/features-v4.npz) were computed on one CPU; on another, fp32
matrix products and reductions sum in another order (other vector widths, other blocking) and the
rows differ in the last bits, amplified through 30 layers. This script recomputes the rows in
fresh processes under each kernel path torch can be told to take on this machine
(ATEN_CPU_CAPABILITY=default|avx2|avx512, MKL's instruction set, 1 and 2 threads), each as the
tests compute them (all seven episodes with their prefixes shared, and each episode alone), and
prints the worst difference against the pinned rows and between paths, in two measures:

    old     |got - want| / (1e-3 + |want|)             (what the tests used: an element near zero,
                                                        such as a gain a - b of two close log-probs,
                                                        fails on noise)
    scaled  |got - want| / (|want| + rms(want's block)) (the block: the pooled hidden state, the
                                                        last hidden state, the scalars; fp32
                                                        reordering errors scale with the
                                                        magnitudes summed, not with the result)

    .venv/bin/python bench/value_fp_spread.py            (about 2 minutes per path on 1 thread)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "value" / "data" / "features-v4.npz"
PATHS = [
    {"ATEN_CPU_CAPABILITY": "avx512"},
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "THREADS": "2"},
]


def child(out: str) -> None:
    """In a fresh process: the rows, shared and alone, saved to `out`."""
    sys.path.insert(0, str(ROOT / "tests" / "value"))
    from test_features import fixed_episodes  # the tests' own episodes

    from orchard_cli.models.local_model import load_model
    from orchard_cli.training.model_loading import load_base_model
    from orchard_cli.value.features import Featurizer, clear_cache
    from orchard_cli.value.model import base_identity
    from orchard_cli.value.reading import Reading

    import torch

    threads = int(os.environ.get("THREADS", "1"))
    load_base_model("smollm2")
    base = load_model("smollm2", threads=threads)
    f = Featurizer(base, max_tokens=512, fingerprint=base_identity("smollm2", base).fingerprint, precision="fp32",
                   spec="smollm2", reading=Reading(cache=False, device="cpu", threads=threads))
    eps = fixed_episodes()
    clear_cache()
    shared = f.features(eps)
    clear_cache()
    alone = np.stack([f.compute([ep])[0] for ep in eps])
    np.savez(out, shared=shared, alone=alone, capability=torch.backends.cpu.get_cpu_capability())


def blocks(width: int, hidden: int) -> list[slice]:
    return [slice(0, hidden), slice(hidden, 2 * hidden), slice(2 * hidden, width)]


def measures(got: np.ndarray, want: np.ndarray, hidden: int) -> tuple[float, float]:
    old = np.abs(got - want) / (1e-3 + np.abs(want))
    scale = np.zeros_like(want)
    for part in blocks(want.shape[1], hidden):
        scale[:, part] = np.sqrt(np.mean(want[:, part] ** 2, axis=1, keepdims=True))
    scaled = np.abs(got - want) / (np.abs(want) + scale)
    return float(old.max()), float(scaled.max())


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    pinned = np.load(PINNED)["features"]
    hidden = 576  # SmolLM2-135M
    rows: dict[str, dict[str, np.ndarray]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, extra in enumerate(PATHS):
            out = Path(tmp) / f"{index}.npz"
            env = {**os.environ, "OMP_NUM_THREADS": extra.get("THREADS", "1"), **extra}
            subprocess.run([sys.executable, __file__, "--child", str(out)], env=env, check=True)
            with np.load(out) as saved:
                name = " ".join(f"{k}={v}" for k, v in extra.items()) + f" (torch: {saved['capability']})"
                rows[name] = {"shared": saved["shared"], "alone": saved["alone"]}
    print("| kernel path | vs pinned, old | vs pinned, scaled | shared vs alone, old | shared vs alone, scaled |")
    print("|---|---|---|---|---|")
    for name, got in rows.items():
        a = measures(got["shared"], pinned, hidden)
        b = measures(got["shared"], got["alone"], hidden)
        print(f"| {name} | {a[0]:.1e} | {a[1]:.1e} | {b[0]:.1e} | {b[1]:.1e} |")
    names = list(rows)
    worst = max(measures(rows[x]["shared"], rows[y]["shared"], hidden)[1] for x in names for y in names if x != y)
    print(f"\nbetween kernel paths, scaled: {worst:.1e}")
    print(json.dumps({"paths": len(names)}))


if __name__ == "__main__":
    main()

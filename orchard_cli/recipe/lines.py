"""The command line each recipe stage stands for, built from the very configs the stage runs, in
this one place: a stage can be run again by hand (or swapped: train on a GPU cluster with another
engine, put the checkpoint in DIR/student, come back with --resume) from what the recipe prints.

The one CLI vocabulary (docs/cli.md): the suite positional, `--model` + `--base-url`, one
`--timeout`; a limit is printed unless it is the commands' shared default (EpisodeOptions').
"""

from __future__ import annotations

import shlex
from typing import Any

PROGRAM = "orchard"


def _join(argv: list[Any]) -> str:
    return shlex.join([PROGRAM, *(str(a) for a in argv)])


def _opt(argv: list[Any], flag: str, value: Any, default: Any = None) -> None:
    if value is not None and value != default:
        argv += [flag, value]


def _limits(argv: list[Any], options: Any) -> None:
    """An episode's limits, each unless it is the default every command shares."""
    from orchard_cli.rollout.agent import EpisodeOptions

    default = EpisodeOptions()
    _opt(argv, "--timeout", f"{options.timeout_seconds:g}", f"{default.timeout_seconds:g}")
    _opt(argv, "--max-turns", options.max_turns, default.max_turns)
    _opt(argv, "--max-calls", options.max_calls, default.max_calls)
    _opt(argv, "--max-tokens", options.max_tokens, default.max_tokens)


def synth(family: str, n: int, seed: int, templates: list[str] | None, out_dir: str, jobs: int) -> str:
    argv: list[Any] = ["tasks", "synth", "--family", family, "--n", n, "--seed", seed]
    if templates:
        argv += ["--templates", ",".join(templates)]
    argv += ["--out-dir", out_dir]
    _opt(argv, "--jobs", jobs, 1)
    return _join(argv)


def distill(config: Any) -> str:
    """`orchard distill` for a DistillConfig."""
    argv: list[Any] = ["distill", config.suite]
    _opt(argv, "--family", config.family)
    for teacher in config.teachers:
        argv += ["--model", teacher]
    _opt(argv, "--base-url", config.base_url)
    _opt(argv, "--api-key-env", config.api_key_env)
    argv += ["--harness", config.harness]
    _opt(argv, "--attempts", config.attempts, 1)
    _opt(argv, "--workers", config.workers, 1)
    _limits(argv, config.options)
    argv += ["--out", config.out]
    return _join(argv)


def train(config: Any) -> str:
    """`orchard train` for a TrainConfig."""
    argv: list[Any] = ["train"]
    for path in config.trajectories:
        argv += ["-t", path]
    argv += ["--model", config.base_model, "--out", config.out, "--builder", config.builder]
    if config.max_steps is not None:
        argv += ["--max-steps", config.max_steps]
    else:
        _opt(argv, "--epochs", config.epochs, 1)
    _opt(argv, "--lr", f"{config.peak_lr:g}")
    _opt(argv, "--max-seq-len", config.max_seq_len, 2048)
    _opt(argv, "--batch-size", config.batch_size, 1)
    _opt(argv, "--grad-accum", config.grad_accum, 1)
    if not config.packing:
        argv.append("--no-packing")
    if config.lora:
        argv += ["--lora", "--lora-r", config.lora_r] + (["--merge"] if config.merge else [])
    _opt(argv, "--seed", config.seed, 0)
    _opt(argv, "--threads", config.threads)
    _opt(argv, "--precision", config.precision, "auto")
    _opt(argv, "--eval-suite", config.eval_suite)
    if not config.filters.only_resolved:
        argv.append("--include-unresolved")
    return _join(argv)


def serve(model: str, port: int, max_tokens: int, temperature: float, threads: int, device: str = "cpu") -> str:
    argv: list[Any] = ["serve", "--model", model, "--port", port]
    _opt(argv, "--device", device, "cpu")
    _opt(argv, "--max-new-tokens", max_tokens, 512)
    _opt(argv, "--temperature", f"{temperature:g}", "0")
    _opt(argv, "--threads", threads, 1)
    return _join(argv) + " &"


def evaluate(config: Any) -> str:
    """`orchard eval` for an EvalConfig."""
    argv: list[Any] = ["eval", config.suite]
    _opt(argv, "--family", config.family)
    argv += ["--harness", config.harness, "--model", config.model, "--base-url", config.base_url]
    _opt(argv, "--attempts", config.attempts, 1)
    _opt(argv, "--workers", config.workers, 1)
    _opt(argv, "--max-turns", config.max_turns)
    _opt(argv, "--timeout", f"{config.timeout:g}" if config.timeout else None)
    _opt(argv, "--max-calls", config.max_calls)
    _opt(argv, "--max-tokens", config.max_tokens)
    _opt(argv, "--seed", config.seed)
    _opt(argv, "--max-errors", config.max_errors, 0)
    argv += ["--out", config.out]
    return _join(argv)


def rl(config: Any) -> str:
    """`orchard rl` for an RLConfig."""
    selection = config.selection
    argv: list[Any] = ["rl", selection.suite]
    _opt(argv, "--family", selection.family)
    argv += ["--model", config.model, "--harness", config.harness, "--steps", config.steps,
             "--tasks-per-step", config.tasks_per_step, "-G", config.group_size,
             "--temperature", f"{config.sampling.temperature:g}"]
    _opt(argv, "--max-new-tokens", config.sampling.max_new_tokens)
    argv += ["--lr", f"{config.learner.lr:g}"]
    if config.eval_selection is not None:
        argv += ["--eval-suite", config.eval_selection.suite, "--eval-every", config.eval_every]
        _opt(argv, "--eval-limit", config.eval_selection.limit)
    _opt(argv, "--eval-attempts", config.eval_attempts, 4)
    _limits(argv, config.options)
    _opt(argv, "--workers", config.workers, 1)
    _opt(argv, "--seed", config.seed, 0)
    if config.shuffle_rewards:
        argv.append("--shuffle-rewards")
    argv += ["--out", config.out]
    return _join(argv)

"""`run_recipe(config)`: the recipe's stages in order, each skipped when it already ran on the same
inputs (`--resume`), then the report. `plan_recipe` checks everything that can be checked before
any stage runs (a bad configuration is one line, exit 2).

    synth          DIR/tasks/{train,heldout,unseen}/      orchard tasks synth --family F ...
    distill        DIR/distill/demos.jsonl (+ demos.run/)  orchard distill --base-url gold ...
    student        DIR/student/                           orchard train --builder merged ...
    control        DIR/control/student/ (--control)       orchard train on shuffled demonstrations
    near-miss      DIR/near-miss/{demos.jsonl,student/}   orchard distill --base-url near-miss, then
                   (--near-miss-control)                  orchard train --include-unresolved
    eval-<arm>     DIR/eval/<arm>-<set>/                  orchard serve + orchard eval ...
    rl             DIR/rl/run/ (+ rl/control/) (--rl)     orchard rl --model DIR/student ...
    report         DIR/report.{md,html,png,json}
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from orchard_cli.errors import UsageError
from orchard_cli.recipe import stages_data, stages_eval, stages_model
from orchard_cli.recipe.config import RecipeConfig
from orchard_cli.recipe.context import Ctx
from orchard_cli.recipe.state import RunFolder, StageRecord, digest

Body = Callable[[Ctx, StageRecord, bool], None]

HARNESS_PROMPT_CHARS = {"openclaw": 26_000}
"""The system prompt and tool schemas a harness sends before any task text (measured: OpenClaw
2026.9.6 sends ~26 KB). orchard's own harnesses are measured from their source (`_fixed_prompt`)."""
CHARS_PER_TOKEN = 3.0
"""A low estimate of characters per token (SmolLM2 on the bash agent's prompts: 3.1-3.7)."""


def _fixed_prompt(config: RecipeConfig) -> int | None:
    """Characters the harness sends before any task text, at most; None when unknown."""
    if config.harness == "bash":
        from orchard_cli.harnesses.bash_agent_main import SYSTEM_TOOLS, TOOLS_SECTION

        return len(SYSTEM_TOOLS) + len(TOOLS_SECTION) + 300 * 6  # ~300 characters per task tool
    if config.harness == "web":
        from orchard_cli.harnesses.web_agent_main import EXAMPLES, OBSERVATION_LIMIT, SYSTEM

        return len(SYSTEM) + sum(map(len, EXAMPLES)) + OBSERVATION_LIMIT
    return HARNESS_PROMPT_CHARS.get(config.harness)


def _context(student: str) -> int:
    """The student's context window (max_position_embeddings of its config)."""
    import json
    from pathlib import Path

    from orchard_cli.models.local_model import SMOLLM2

    if student == SMOLLM2:
        return 8192
    path = Path(student) / "config.json"
    try:
        return int(json.loads(path.read_text()).get("max_position_embeddings") or 8192)
    except (OSError, ValueError):
        return 8192


def check_context(config: RecipeConfig) -> None:
    """The harness's fixed prompt must fit the student's context and the training length."""
    chars = _fixed_prompt(config)
    if chars is None:
        return
    tokens = int(chars / CHARS_PER_TOKEN)
    room = min(_context(config.student), config.train.max_seq_len)
    if tokens > room:
        raise UsageError(f"the {config.harness} harness sends ~{chars // 1000} KB of prompt before the task "
                         f"(~{tokens:,} tokens); the student holds {_context(config.student):,} tokens and trains on "
                         f"{config.train.max_seq_len:,} (--max-seq-len): it could never see a whole turn",
                         hint="choose a harness with a shorter prompt (bash, web) or a student with a longer context")


def check_device(config: RecipeConfig) -> None:
    if config.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # training and serving stay on the CPU
        return
    if config.device == "cuda":
        try:
            import torch
        except ModuleNotFoundError:
            raise UsageError("--device cuda needs torch, which is not installed") from None
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device on this machine",
                             hint="use --device cpu (or auto)")


def plan_recipe(config: RecipeConfig, *, resume: bool = False) -> RunFolder:
    """Every check that needs no stage to run; nothing is written."""
    from orchard_cli.rollout.agent import Upstream, load_ready_harness
    from orchard_cli.training.model_loading import check_base_model

    folder = RunFolder(config.out)
    folder.check(config, resume)
    load_ready_harness(config.harness)
    stages_data.chosen_templates(config)
    if config.distill.teacher == "gold" and config.distill.base_url not in (None, "gold"):
        raise UsageError("--teacher gold is the in-package demonstrator: it takes no --teacher-base-url")
    if config.distill.teacher != "gold" and not config.distill.base_url:
        raise UsageError(f"--teacher {config.distill.teacher}: name its endpoint with --teacher-base-url URL",
                         hint="or --teacher gold (each task's reference solution, played through the harness)")
    Upstream(config.teacher_url, config.distill.key_env)
    check_base_model(config.student)
    check_context(config)
    check_device(config)
    if config.eval.attempts > 1 and config.eval.temperature == 0:
        raise UsageError("--attempts above 1 with greedy decoding gives the same attempt k times",
                         hint="add --temperature 0.7 (or keep one attempt)")
    return folder


def stages(config: RecipeConfig) -> list[tuple[str, Body]]:
    out: list[tuple[str, Body]] = [("synth", stages_data.synth), ("distill", stages_data.distill),
                                   ("student", stages_model.student)]
    controls = [name for name, on in (("control", config.control.shuffled),
                                      ("near-miss", config.control.near_miss)) if on]
    out += [(name, getattr(stages_model, name.replace("-", "_"))) for name in controls]
    arms = ["teacher", "base", "student", *controls]
    out += [(f"eval-{arm}", _eval(arm)) for arm in arms]
    if config.rl.enabled:
        out += [("rl", stages_model.rl), ("eval-rl", _eval("rl"))]
    return out


def _eval(arm: str) -> Body:
    def body(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
        stages_eval.evaluate(ctx, record, continuing, arm)
    return body


def inputs(ctx: Ctx, name: str) -> dict[str, Any]:
    """What a stage's result depends on (its config part and the digests of what it reads)."""
    from orchard_cli.recipe.control import CONTROL_FORMAT

    c = ctx.config
    sets = {s: ctx.set_digest(s) for s in ("train", "heldout", "unseen")}
    evaluation = c.eval.model_dump(exclude={"workers"})
    table: dict[str, Any] = {
        "synth": {"family": c.family, "synth": c.synth.model_dump(), "backend": c.backend},
        "distill": {"distill": c.distill.model_dump(), "harness": c.harness, "timeout": c.eval.timeout,
                    "train": sets["train"]},
        "student": {"train": c.train.model_dump(), "student": c.student, "demos": ctx.outputs("distill"),
                    "heldout": sets["heldout"]},
        "control": {"control": c.control.model_dump(exclude={"near_miss"}), "format": CONTROL_FORMAT,
                    "train": c.train.model_dump(),
                    "student": c.student, "demos": ctx.outputs("distill"), "heldout": sets["heldout"]},
        "near-miss": {"train": c.train.model_dump(), "student": c.student, "harness": c.harness,
                      "timeout": c.eval.timeout, "attempts": c.distill.attempts, "backend": c.backend, "train_set": sets["train"], "heldout": sets["heldout"]},
        "rl": {"rl": c.rl.model_dump(), "student": ctx.outputs("student"), "train": sets["train"],
               "heldout": sets["heldout"], "reply": c.eval.max_reply_tokens, "turns": c.eval.max_turns,
               "max_seq_len": c.train.max_seq_len},
    }
    if name.startswith("eval-"):
        arm = name[5:]
        model = {"teacher": c.distill.model_dump(), "base": c.student}.get(arm) or ctx.outputs(arm)
        return {"eval": evaluation, "harness": c.harness, "sets": {s: sets[s] for s in ctx.eval_sets()},
                "model": model}
    return table[name]


def run_stage(ctx: Ctx, name: str, body: Body) -> StageRecord:
    key = digest(inputs(ctx, name))
    old = ctx.folder.record(name)
    if old is not None and old.status == "finished" and old.inputs == key:
        ctx.say(f"[{name}] done earlier ({old.seconds:.0f} s): skipped")
        ctx.records[name] = old
        return old
    continuing = old is not None and old.status == "running" and old.inputs == key
    ctx.say(f"[{name}] " + ("continuing" if continuing else "running"))
    record = StageRecord(name=name, inputs=key)
    ctx.folder.save(record)
    clock = time.monotonic()
    body(ctx, record, continuing)
    record.seconds = round(time.monotonic() - clock + (old.seconds if continuing and old else 0.0), 1)
    record.status = "finished"
    ctx.folder.save(record)
    ctx.records[name] = record
    ctx.say(f"[{name}] finished in {record.seconds:.0f} s")
    return record


def run_recipe(config: RecipeConfig, *, resume: bool = False, say: Callable[[str], None] = print,
               progress: bool = True) -> dict[str, Any]:
    """Plan, then run (or skip) every stage, then write the report; returns the report's data."""
    from orchard_cli.recipe.report import write_report

    folder = plan_recipe(config, resume=resume)
    folder.write_config(config)
    ctx = Ctx(config=config, folder=folder, say=say, progress=progress)
    for name, body in stages(config):
        run_stage(ctx, name, body)
    data = write_report(ctx)
    say(f"[report] {folder.path('report.md')} (also report.html, report.png, report.json)")
    return data

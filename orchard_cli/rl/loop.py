"""`orchard rl`: the on-policy loop on one machine.

    load the policy twice: a served copy (`orchard serve`'s server, in this process, on loopback)
    and the learner's copy (fp32, train mode); plus a frozen reference when beta > 0
    for each step:
        sample `tasks_per_step` tasks (seeded by the step), roll out G attempts each through the
        rollout core against the served copy (`rl.rollouts`), group advantages
        update the learner on the step's rollouts (`rl.learner`)
        copy the learner's weights into the served copy (the weight sync; its time is logged)
        every `eval_every` steps: an eval run on the held-out suite, sampled as in training, with
        its own scorecard (DIR/eval/step-N/)
        every `save_every` steps: a resumable checkpoint (DIR/checkpoints/step-N)
    the final policy goes to DIR/model (a checkpoint folder `orchard serve --model` takes)

The run folder DIR (`--out`) holds orchard_rl.json (the run's identity and progress), rollouts.jsonl
(every rollout, appended as groups finish), steps.jsonl (one line per step), evals.jsonl,
reward_curve.png and summary.json. `--resume` continues from the latest checkpoint with the same
task order; lines written after that checkpoint are dropped first, so each step appears once.
`--rollouts FILE` trains on a rollouts file alone (no environment, no serving unless an eval suite
is named): its groups, `tasks_per_step` at a time, in file order.

Under `torchrun` (several processes), rank 0 does everything above and sends each step's rollouts
to the others; every process takes its share of the step's micro-batches and the gradients are
summed before each optimizer step (`Learner`), so all copies stay equal.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli import __version__
from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, iter_jsonl, read_json, write_json
from orchard_cli.rl.learner import LearnerConfig, UpdateStats
from orchard_cli.rl.records import Rollout, assign_advantages, reward_stats
from orchard_cli.rl.rollouts import Sampling, nothing_trainable
from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.tasks.base import TaskSelection

STATE_FILE = "orchard_rl.json"
_RESUMABLE = {"out", "resume", "steps", "save_every", "eval_every", "workers"}


class RLConfig(BaseModel):
    """Everything `orchard rl` was asked to do (DIR/orchard_rl.json)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    selection: TaskSelection | None = None
    """The tasks to train on (None with `rollouts_file`)."""
    eval_selection: TaskSelection | None = None
    """Held-out tasks, evaluated every `eval_every` steps."""
    rollouts_file: str | None = None
    model: str = "smollm2"
    out: str
    harness: str = "chat"
    steps: int = Field(20, ge=1)
    tasks_per_step: int = Field(4, ge=1)
    group_size: int = Field(4, ge=2)
    sampling: Sampling = Field(default_factory=Sampling)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval_every: int = Field(0, ge=0)
    eval_attempts: int = Field(4, ge=1)
    save_every: int = Field(5, ge=1)
    workers: int = Field(1, ge=1)
    backend: str = "local"
    seed: int = 0
    shuffle_rewards: bool = False
    """A control run: rewards are shuffled across the step's episodes before advantages."""
    options: EpisodeOptions = Field(default_factory=lambda: EpisodeOptions(timeout_seconds=300, max_turns=10))
    resume: bool = False
    orchard_version: str = __version__


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    fingerprint: str
    status: Literal["running", "finished"] = "running"
    config: RLConfig
    step: int = 0


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    step: int
    tasks: list[str]
    episodes: int
    trainable: int
    mean_reward: float | None
    groups_with_signal: int
    loss: float
    grad_norm: float
    clipped: float
    kl: float | None
    logprob_gap: float | None
    tokens: int
    trained_tokens: int
    rollout_seconds: float
    update_seconds: float
    sync_seconds: float
    learner_tokens_per_s: float | None


def fingerprint(config: RLConfig) -> str:
    fixed = config.model_dump(mode="json", exclude=_RESUMABLE | {"learner"})
    fixed["learner"] = config.learner.model_dump(mode="json", exclude={"threads"})
    if config.rollouts_file:
        fixed["rollouts_sha256"] = hashlib.sha256(Path(config.rollouts_file).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:20]


def check_out(config: RLConfig, fp: str) -> RunState | None:
    """The state to resume, None for a fresh run; a folder that is not this run is refused."""
    out = Path(config.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is a file", hint="pass a new folder")
    if not out.exists() or not any(out.iterdir()):
        return None
    path = out / STATE_FILE
    if not path.is_file():
        raise UsageError(f"--out {out} exists and is not an orchard rl run (no {STATE_FILE})",
                         hint="pass a new or empty folder")
    try:
        state = RunState.model_validate(read_json(path))
    except ValueError as exc:
        raise UsageError(f"{path} is not an orchard rl state: {str(exc).splitlines()[0]}") from None
    if state.fingerprint != fp:
        raise UsageError(f"--out {out} holds another rl run (other tasks, model or settings)",
                         hint="pass a new folder, or the same arguments as that run with --resume")
    if not config.resume:
        raise UsageError(f"--out {out} already holds this run ({state.status}, step {state.step})",
                         hint="add --resume to continue it, or pass a new folder")
    return state


def shuffle_rewards(rollouts: list[Rollout], rng: random.Random) -> None:
    """The control: the step's rewards, permuted across its episodes, then advantages again."""
    members = [r for r in rollouts if r.trainable]
    rewards = [r.reward for r in members]
    rng.shuffle(rewards)
    for r, reward in zip(members, rewards):
        r.reward = reward
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.uid, []).append(r)
    for group in groups.values():
        assign_advantages(group)


def _keep_lines(path: Path, last_step: int) -> None:
    """Drop the lines of steps after `last_step` (written after the checkpoint a resume starts from)."""
    if not path.exists():
        return
    kept = [row for row in iter_jsonl(path) if (row.get("step") or 0) <= last_step]
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as fh:
        for row in kept:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    partial.replace(path)


class RLRun:
    """A planned run (`plan_rl`); `execute()` runs the remaining steps."""

    def __init__(self, config: RLConfig, state: RunState | None, fp: str) -> None:
        self.config, self.state, self.fp = config, state, fp
        self.out = Path(config.out)
        self.family: Any = None
        self.tasks: list[Any] = []
        self.eval_family: Any = None
        self.eval_tasks: list[Any] = []
        self.offline: list[list[Rollout]] = []
        self.harness: Any = None

    # ---- what each step trains on -------------------------------------------------------------

    def step_tasks(self, step: int) -> list[Any]:
        rng = random.Random(self.config.seed * 1_000_003 + step)
        k = min(self.config.tasks_per_step, len(self.tasks))
        return rng.sample(self.tasks, k)

    def offline_batch(self, step: int) -> list[Rollout]:
        """The file's groups, `tasks_per_step` distinct ones per step, in file order (wrapping)."""
        groups = self.offline
        per = min(self.config.tasks_per_step, len(groups))
        chosen = [groups[((step - 1) * per + i) % len(groups)] for i in range(per)]
        return [r.model_copy(deep=True, update={"step": step}) for g in chosen for r in g]

    # ---- the loop -----------------------------------------------------------------------------

    def execute(self, on_step: Callable[[StepRecord], None] | None = None,
                on_eval: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        import torch

        from orchard_cli.models.local_model import LocalModel, load_weights
        from orchard_cli.models.local_server import LocalEndpoint
        from orchard_cli.rl.learner import Learner
        from orchard_cli.training.trainer import Dist, latest_checkpoint, load_checkpoint, save_checkpoint

        cfg = self.config
        torch.manual_seed(cfg.seed)
        dist = Dist.from_env()
        if dist.world > 1 and not torch.distributed.is_initialized():
            if torch.cuda.is_available():
                torch.cuda.set_device(dist.local_rank)
            from datetime import timedelta

            # Followers wait in a broadcast while rank 0 rolls out and evaluates: hours, not minutes.
            torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                                 timeout=timedelta(hours=12))
        if not dist.main:
            return self._follow(dist)
        self.out.mkdir(parents=True, exist_ok=True)
        start = 0
        learner_model, tokenizer, source = load_weights(cfg.model)
        reference = load_weights(cfg.model)[0] if cfg.learner.beta > 0 else None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        learner = Learner(learner_model, cfg.learner, pad_id=tokenizer.pad_token_id, reference=reference, dist=dist)
        if self.state is not None:
            found = latest_checkpoint(self.out / "checkpoints")
            if found is not None:
                start = load_checkpoint(learner_model, learner.optimizer, found, learner.device)
            for name in ("steps.jsonl", "rollouts.jsonl"):
                _keep_lines(self.out / name, start)
            _keep_lines(self.out / "evals.jsonl", start if start else -1)  # step 0's evaluation runs again
        state = RunState(fingerprint=self.fp, config=cfg, step=start)
        write_json(self.out / STATE_FILE, state)
        needs_serving = bool(not self.offline or self.eval_tasks)
        served = endpoint = info = None
        if needs_serving:  # the policy's own copy, in the server (the learner's copy is synced into it)
            name = "smollm2" if cfg.model == "smollm2" else Path(source).name
            served = LocalModel(name, Path(source), tokenizer, load_weights(cfg.model)[0].eval())
            served.load_weights_from(learner_model, version=str(start))  # the weights after `start` steps
            endpoint = LocalEndpoint(cfg.model, model=served, default_temperature=cfg.sampling.temperature)
            info = endpoint.start()
        env = policy = None
        steps_log = JsonlWriter(self.out / "steps.jsonl")
        rollouts_log = JsonlWriter(self.out / "rollouts.jsonl")
        evals_log = JsonlWriter(self.out / "evals.jsonl")
        history: list[StepRecord] = [StepRecord.model_validate(r) for r in iter_jsonl(self.out / "steps.jsonl")]
        evals: list[dict[str, Any]] = list(iter_jsonl(self.out / "evals.jsonl"))
        updating = False
        try:
            if not self.offline:
                from orchard_cli.env import connect
                from orchard_cli.rl.rollouts import Policy, Rollouts
                from orchard_cli.rollout.agent import Upstream

                env = connect(cfg.backend)
                policy = Policy(Upstream(info.base_url), info.model, self.harness, cfg.sampling, cfg.options)
                engine = Rollouts(self.family, [policy], env=env, backend=cfg.backend, workers=cfg.workers)
            due = cfg.eval_every and self.eval_tasks and (start == 0 or start % cfg.eval_every == 0
                                                         or start == cfg.steps)
            if due and not any(e.get("step") == start for e in evals):  # step 0, or one a crash cut short
                evals.append(self.evaluate(start, info, evals_log, on_eval))
            for step in range(start + 1, cfg.steps + 1):
                clock = time.monotonic()
                if self.offline:
                    rollouts = self.offline_batch(step)
                    names = sorted({r.task_id for r in rollouts})
                else:
                    chosen = self.step_tasks(step)
                    names = [t.task_id for t in chosen]
                    rollouts = engine.run(chosen, cfg.group_size, step=step)
                rollout_s = time.monotonic() - clock
                for r in rollouts:  # as sampled and graded (a control run shuffles after this)
                    rollouts_log.write(r)
                if not self.offline:
                    nothing_trainable(rollouts, where="the step's rollouts in rollouts.jsonl")
                if cfg.shuffle_rewards:
                    shuffle_rewards(rollouts, random.Random(cfg.seed * 7919 + step))
                _share(dist, rollouts)
                updating = True  # the followers are in the update's collectives now, not in a broadcast
                stats = learner.update(rollouts, temperature=cfg.sampling.temperature,
                                       max_completion_length=cfg.sampling.max_new_tokens or cfg.learner.max_seq_len)
                updating = False
                sync_s = served.load_weights_from(learner_model, version=str(step)) if served is not None else 0.0
                record = _step_record(step, names, rollouts, stats, rollout_s, sync_s)
                steps_log.write(record)
                history.append(record)
                if on_step is not None:
                    on_step(record)
                if step % cfg.save_every == 0 or step == cfg.steps:
                    save_checkpoint(learner_model, learner.optimizer, self.out / "checkpoints", step,
                                    extra={"step": step})
                    state.step = step
                    write_json(self.out / STATE_FILE, state)
                if cfg.eval_every and self.eval_tasks and (step % cfg.eval_every == 0 or step == cfg.steps):
                    evals.append(self.evaluate(step, info, evals_log, on_eval))
        except BaseException:
            if not updating:  # the other processes stop too (mid-update, torchrun ends them)
                try:
                    _share(dist, None)
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    pass
            raise
        finally:
            steps_log.close()
            rollouts_log.close()
            evals_log.close()
            if policy is not None:
                policy.close()
            if env is not None:
                env.close()
            if endpoint is not None:
                endpoint.stop()
        _share(dist, None)  # the run is over: the other processes return
        final = self.out / "model"
        learner_model.save_pretrained(final)
        tokenizer.save_pretrained(final)
        curve = plot_curve(history, evals, self.out / "reward_curve.png")
        state.status, state.step = "finished", cfg.steps
        write_json(self.out / STATE_FILE, state)
        summary = summarize(cfg, history, evals, final, curve)
        write_json(self.out / "summary.json", summary)
        return summary

    def _follow(self, dist: Any) -> dict[str, Any]:
        """A process other than rank 0 (torchrun): the learner's share of each step, on the
        rollouts rank 0 made and sends; rank 0 serves, rolls out, logs and saves."""
        from orchard_cli.models.local_model import load_weights
        from orchard_cli.rl.learner import Learner
        from orchard_cli.training.trainer import latest_checkpoint, load_checkpoint

        cfg = self.config
        model, tokenizer, _ = load_weights(cfg.model)
        reference = load_weights(cfg.model)[0] if cfg.learner.beta > 0 else None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        learner = Learner(model, cfg.learner, pad_id=tokenizer.pad_token_id, reference=reference, dist=dist)
        found = latest_checkpoint(self.out / "checkpoints") if cfg.resume else None  # before rank 0 writes one
        if found is not None:
            load_checkpoint(model, learner.optimizer, found, learner.device)
        while True:
            rollouts = _share(dist, None)
            if rollouts is None:
                return {}
            learner.update(rollouts, temperature=cfg.sampling.temperature,
                           max_completion_length=cfg.sampling.max_new_tokens or cfg.learner.max_seq_len)

    def evaluate(self, step: int, info: Any, log: JsonlWriter,
                 on_eval: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        """An eval run of the served policy on the held-out tasks, with its own scorecard."""
        from orchard_cli.rollout.agent import AgentSolver, Upstream
        from orchard_cli.rollout.eval_run import EvalConfig, EvalRun

        cfg, sel = self.config, self.config.eval_selection
        assert sel is not None
        folder = self.out / "eval" / f"step-{step:06d}"
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        solver = AgentSolver(self.harness, model=info.model, upstream=Upstream(info.base_url), options=cfg.options,
                             proxy_options=cfg.sampling.proxy_options())
        config = EvalConfig(suite=sel.suite, family=sel.family, dataset=sel.dataset, instances=sel.instances,
                            limit=sel.limit, slice=sel.slice, backend=cfg.backend, attempts=cfg.eval_attempts,
                            source=solver.name, model=info.model, base_url=info.base_url, harness=cfg.harness,
                            workers=cfg.workers, out=str(folder))
        card = EvalRun(config, self.eval_family, self.eval_tasks, solver, folder, False).execute()
        graded = card.mean_score_graded if card.mean_score_graded is not None else card.resolved_rate_graded
        row = {"schema_version": 1, "step": step, "mean_reward": graded, "resolved_rate": card.resolved_rate,
               "episodes": card.total, "errors": card.errors,
               "scorecard": str(folder.relative_to(self.out) / "scorecard.json")}
        log.write(row)
        if on_eval is not None:
            on_eval(row)
        return row


def _share(dist: Any, rollouts: list[Rollout] | None) -> list[Rollout] | None:
    """Rank 0 sends a step's rollouts (None: stop) to the other processes; they receive them."""
    if dist.world <= 1:
        return rollouts
    import torch

    box: list[Any] = [[r.model_dump(mode="json") for r in rollouts] if rollouts is not None else None]
    torch.distributed.broadcast_object_list(box, src=0)
    return None if box[0] is None else [Rollout.model_validate(r) for r in box[0]]


def _step_record(step: int, names: list[str], rollouts: list[Rollout], stats: UpdateStats, rollout_s: float,
                 sync_s: float) -> StepRecord:
    trainable, mean, signal = reward_stats(rollouts)
    return StepRecord(
        step=step, tasks=names, episodes=len(rollouts), trainable=trainable, mean_reward=mean,
        groups_with_signal=signal, loss=round(stats.loss, 6),
        grad_norm=round(stats.grad_norm, 6), clipped=round(stats.clipped, 4),
        kl=None if stats.kl is None else round(stats.kl, 6),
        logprob_gap=None if stats.logprob_gap is None else round(stats.logprob_gap, 6), tokens=stats.tokens,
        trained_tokens=stats.trained_tokens, rollout_seconds=round(rollout_s, 3),
        update_seconds=round(stats.seconds, 3), sync_seconds=round(sync_s, 4),
        learner_tokens_per_s=round(stats.tokens_per_s, 1) if stats.tokens_per_s else None)


def plot_curve(history: list[StepRecord], evals: list[dict[str, Any]], path: Path) -> str | None:
    """The mean reward per step (training rollouts) and at each evaluation (held-out), as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    points = [(h.step, h.mean_reward) for h in history if h.mean_reward is not None]
    if points:
        ax.plot(*zip(*points), marker=".", color="#6b8fbf", label="training rollouts (mean reward)")
    held = [(e["step"], e["mean_reward"]) for e in evals if e.get("mean_reward") is not None]
    if held:
        ax.plot(*zip(*held), marker="o", color="#d0703c", label="held-out tasks (mean reward)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    partial = path.with_name(path.name + ".partial.png")
    fig.savefig(partial)
    plt.close(fig)
    partial.replace(path)
    return str(path)


def summarize(cfg: RLConfig, history: list[StepRecord], evals: list[dict[str, Any]], model: Path,
              curve: str | None) -> dict[str, Any]:
    rates = [h.learner_tokens_per_s for h in history if h.learner_tokens_per_s]
    syncs = sorted(h.sync_seconds for h in history if h.sync_seconds)
    return {"schema_version": 1, "out": cfg.out, "steps": len(history), "model": str(model), "reward_curve": curve,
            "first_mean_reward": history[0].mean_reward if history else None,
            "last_mean_reward": history[-1].mean_reward if history else None,
            "evals": evals, "episodes": sum(h.episodes for h in history),
            "median_learner_tokens_per_s": sorted(rates)[len(rates) // 2] if rates else None,
            "median_sync_seconds": syncs[len(syncs) // 2] if syncs else None}


def plan_rl(config: RLConfig) -> RLRun:
    """Check the options, the run folder and the tasks; nothing is started or written yet."""
    from orchard_cli.rollout.agent import load_ready_harness
    from orchard_cli.tasks.registry import load_suite

    if (config.selection is None) == (config.rollouts_file is None):
        raise UsageError("name the tasks to train on (SUITE) or a rollouts file (--rollouts FILE), not both")
    if config.rollouts_file is not None and not Path(config.rollouts_file).is_file():
        raise UsageError(f"--rollouts {config.rollouts_file}: no such file")
    from orchard_cli.models.local_model import resolve_checkpoint

    resolve_checkpoint(config.model)  # a model that is not there is one line now
    from orchard_cli.training.trainer import Dist

    fp = fingerprint(config)
    state = check_out(config, fp) if Dist.from_env().main else None  # rank 0 owns the folder
    run = RLRun(config, state, fp)
    if config.selection is not None or config.eval_selection is not None:
        run.harness = load_ready_harness(config.harness)
    if config.selection is not None:
        run.family, run.tasks = load_suite(config.selection)
        if not run.tasks:
            raise UsageError(f"no tasks selected from {config.selection.suite}",
                             hint="check --instances / --limit / --slice")
        from orchard_cli.prereqs import require_host

        require_host(backend=config.backend, family=run.family.name, harness=config.harness,
                     what=f"{Path(config.selection.suite).name} on the {config.backend} backend")
    else:
        from orchard_cli.rl.rollouts import read_rollouts

        groups: dict[str, list[Rollout]] = {}
        for r in read_rollouts(config.rollouts_file):  # type: ignore[arg-type]
            groups.setdefault(r.uid, []).append(r)
        run.offline = list(groups.values())
    if config.eval_selection is not None:
        run.eval_family, run.eval_tasks = load_suite(config.eval_selection)
    return run

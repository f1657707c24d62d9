"""`orchard rl`: the on-policy loop.

    load the learner's copy of the policy (fp32, train mode; a LoRA adapter with --sync lora),
    plus a frozen reference when beta > 0; the served policy is a copy in this process (`orchard
    serve`'s server, on loopback), or servers orchard did not start (`--base-url`)
    for each step:
        sample `tasks_per_step` tasks (seeded by the step), roll out G attempts each through the
        rollout core against the served policy (`rl.rollouts`), group advantages
        update the learner on the step's rollouts (`rl.learner`)
        sync the weights (`rl.weights`: copied in place, or pushed to the servers as a LoRA
        adapter or a whole checkpoint; its time is logged, and `logprob_gap` says how far the
        served log-probabilities were from the learner's)
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
to the others (`rl.learning`); every process takes its share of the step's micro-batches, the
model is sharded with FSDP2 (`--shard`), and every process joins the weight sync's gathering and
the checkpoints.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, iter_jsonl, write_json
from orchard_cli.rl.config import STATE_FILE, RLConfig, RunState, StepRecord, check_out, fingerprint
from orchard_cli.rl.learner import UpdateStats
from orchard_cli.rl.samples import Rollout, assign_advantages, reward_stats
from orchard_cli.rl.rollouts import nothing_trainable
from orchard_cli.runs import RunFolder

__all__ = ["RLConfig", "RLRun", "RunState", "StepRecord", "STATE_FILE", "plan_rl"]


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

        from orchard_cli.rl.learning import Learning, share, step_message
        from orchard_cli.rl.report import plot_curve, summarize
        from orchard_cli.training.checkpoints import latest_checkpoint
        from orchard_cli.training.parallel import Dist, init_distributed

        cfg = self.config
        torch.manual_seed(cfg.seed)
        dist = Dist.from_env()
        # Followers wait in a broadcast while rank 0 rolls out and evaluates: hours, not minutes.
        init_distributed(dist, timeout_s=12 * 3600)
        if dist.main:
            self.out.mkdir(parents=True, exist_ok=True)
        learning = Learning(cfg, self.out, dist)
        if not dist.main:
            learning.resume(None)
            learning.sync = self._sync(learning, None)
            told = share(dist, None)
            if told is None:  # rank 0 failed before the first step
                return {}
            learning.push(told["start"])
            learning.follow()
            return {}
        found = latest_checkpoint(self.out / "checkpoints") if self.state is not None else None
        start = learning.resume(found)
        try:
            target, served, endpoint = self._serve(learning)
        except BaseException:
            share(dist, None)
            raise
        share(dist, {"start": start})
        learning.push(start)  # the servers hold the learner's weights (a resumed run's too)
        if self.state is not None:
            for name in ("steps.jsonl", "rollouts.jsonl"):
                _keep_lines(self.out / name, start)
            _keep_lines(self.out / "evals.jsonl", start if start else -1)  # step 0's evaluation runs again
        state = RunState(fingerprint=self.fp, config=cfg, step=start)
        write_json(self.out / STATE_FILE, state)
        env = None
        policies: list[Any] = []
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

                assert target is not None
                env = connect(cfg.backend)
                urls = cfg.policy_urls or [target[0]]
                policies = [Policy(Upstream(url, cfg.api_key_env), target[1], self.harness, cfg.sampling, cfg.options)
                            for url in urls]
                engine = Rollouts(self.family, policies, env=env, backend=cfg.backend, workers=cfg.workers)
            due = cfg.eval_every and self.eval_tasks and (start == 0 or start % cfg.eval_every == 0
                                                         or start == cfg.steps)
            if due and not any(e.get("step") == start for e in evals):  # step 0, or one a crash cut short
                evals.append(self.evaluate(start, target, evals_log, on_eval))
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
                share(dist, step_message(step, rollouts))
                updating = True  # the followers are in the update's collectives now, not in a broadcast
                stats, sync_s = learning.step(step, rollouts)
                updating = False
                record = _step_record(step, names, rollouts, stats, rollout_s, sync_s, learning.sync is not None)
                steps_log.write(record)
                history.append(record)
                if on_step is not None:
                    on_step(record)
                if step % cfg.save_every == 0 or step == cfg.steps:
                    state.step = step
                    write_json(self.out / STATE_FILE, state)
                if cfg.eval_every and self.eval_tasks and (step % cfg.eval_every == 0 or step == cfg.steps):
                    evals.append(self.evaluate(step, target, evals_log, on_eval))
        except BaseException:
            if not updating:  # the other processes stop too (mid-update, torchrun ends them)
                try:
                    share(dist, None)
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    pass
            raise
        finally:
            steps_log.close()
            rollouts_log.close()
            evals_log.close()
            for policy in policies:
                policy.close()
            if env is not None:
                env.close()
            if endpoint is not None:
                endpoint.stop()
            if served is not None:
                served.disable_batching()  # the private copy's engine thread ends with the run
        share(dist, {"finish": True})  # every process takes part in gathering the final policy
        final = self.out / "model"
        learning.finish(final)
        curve = plot_curve(history, evals, self.out / "reward_curve.png")
        state.status, state.step = "finished", cfg.steps
        write_json(self.out / STATE_FILE, state)
        summary = summarize(cfg, history, evals, final, curve)
        write_json(self.out / "summary.json", summary)
        return summary

    def _serve(self, learning: Any) -> tuple[tuple[str, str] | None, Any, Any]:
        """Rank 0: where rollouts and evaluations call the policy, (base URL, model name); the
        served copy and its endpoint when the policy is served in this process."""
        cfg = self.config
        if cfg.policy_urls:
            learning.sync = self._sync(learning, None)
            return (cfg.policy_urls[0], learning.sync.model_name()), None, None
        if self.offline and not self.eval_tasks:
            return None, None, None
        from orchard_cli.models.local_model import LocalModel, load_weights
        from orchard_cli.models.local_server import LocalEndpoint

        name = "smollm2" if cfg.model == "smollm2" else Path(learning.source).name
        served = LocalModel(name, Path(learning.source), learning.tokenizer, load_weights(cfg.model)[0].eval())
        endpoint = LocalEndpoint(cfg.model, model=served, default_temperature=cfg.sampling.temperature)
        info = endpoint.start()
        learning.sync = self._sync(learning, served)
        return (info.base_url, info.model), served, endpoint

    def _sync(self, learning: Any, served: Any) -> Any:
        """The weight sync this run uses (followers build the same kind, to join its gathers)."""
        from orchard_cli.models.base import read_key
        from orchard_cli.rl.weights import CheckpointPush, InProcess, LoraPush, served_model

        cfg = self.config
        main = learning.dist.main
        key = read_key(cfg.api_key_env) if main else None
        urls = cfg.policy_urls if main else []
        if cfg.sync == "lora":
            return LoraPush(learning.learner, urls, self.out, key)
        if cfg.sync == "checkpoint":
            name = served_model(urls[0], key) if main else ""
            return CheckpointPush(learning.learner, urls, self.out, key, learning.tokenizer, name)
        if not self.offline or self.eval_tasks:
            return InProcess(learning.learner, served)
        return None

    def evaluate(self, step: int, target: Any, log: JsonlWriter,
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
        base_url, model = target
        solver = AgentSolver(self.harness, model=model, upstream=Upstream(base_url, cfg.api_key_env),
                             options=cfg.options, proxy_options=cfg.sampling.proxy_options())
        config = EvalConfig(suite=sel.suite, family=sel.family, dataset=sel.dataset, instances=sel.instances,
                            limit=sel.limit, slice=sel.slice, backend=cfg.backend, attempts=cfg.eval_attempts,
                            source=solver.name, model=model, base_url=base_url, harness=cfg.harness,
                            workers=cfg.workers, out=str(folder))
        card = EvalRun(config, self.eval_family, self.eval_tasks, solver, folder, False).execute()
        graded = card.mean_score_graded if card.mean_score_graded is not None else card.resolved_rate_graded
        row = {"schema_version": 1, "step": step, "mean_reward": graded, "resolved_rate": card.resolved_rate,
               "episodes": card.total, "errors": card.errors,
               "scorecard": str(RunFolder(folder.relative_to(self.out)).scorecard)}
        log.write(row)
        if on_eval is not None:
            on_eval(row)
        return row


def _step_record(step: int, names: list[str], rollouts: list[Rollout], stats: UpdateStats, rollout_s: float,
                 sync_s: float, pushed: bool) -> StepRecord:
    trainable, mean, signal = reward_stats(rollouts)
    versions = sorted({c.weight_version for r in rollouts for c in r.calls if c.weight_version is not None})
    return StepRecord(
        weight_version=step if pushed else None, served_versions=versions,
        step=step, tasks=names, episodes=len(rollouts), trainable=trainable, mean_reward=mean,
        groups_with_signal=signal, loss=round(stats.loss, 6),
        grad_norm=round(stats.grad_norm, 6), clipped=round(stats.clipped, 4),
        kl=None if stats.kl is None else round(stats.kl, 6),
        logprob_gap=None if stats.logprob_gap is None else round(stats.logprob_gap, 6), tokens=stats.tokens,
        trained_tokens=stats.trained_tokens, rollout_seconds=round(rollout_s, 3),
        update_seconds=round(stats.seconds, 3), sync_seconds=round(sync_s, 4),
        learner_tokens_per_s=round(stats.tokens_per_s, 1) if stats.tokens_per_s else None)


def check_options(config: RLConfig) -> None:
    """The options alone (no file, model or server is asked): what the command checks before its
    pre-flight reaches any server."""
    if (config.selection is None) == (config.rollouts_file is None):
        raise UsageError("name the tasks to train on (SUITE) or a rollouts file (--rollouts FILE), not both")
    if config.policy_urls and config.sync is None:
        raise UsageError("--base-url servers need to be told of new weights: add --sync lora or --sync checkpoint",
                         hint="docs/rl.md says which sync each server supports")
    if config.sync is not None and not config.policy_urls:
        raise UsageError(f"--sync {config.sync} pushes weights to servers: name them with --base-url URL",
                         hint="without --base-url the policy is served in this process and synced in place")
    for url in config.policy_urls:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--base-url {url!r} is not an http(s) URL", hint="e.g. --base-url http://127.0.0.1:8000/v1")
    if config.learner.lora != (config.sync == "lora"):
        raise UsageError("a LoRA policy is pushed as an adapter: use --sync lora with --base-url")
    if config.rollouts_file is not None and not Path(config.rollouts_file).is_file():
        raise UsageError(f"--rollouts {config.rollouts_file}: no such file")


def plan_rl(config: RLConfig) -> RLRun:
    """Check the options, the run folder and the tasks; nothing is started or written yet."""
    from orchard_cli.rollout.agent import load_ready_harness
    from orchard_cli.families import load_suite

    check_options(config)
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

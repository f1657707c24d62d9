"""`orchard rollout` (G attempts per task; token ids, log-probabilities, rewards and advantages on
disk for a GPU trainer) and `orchard rl` (the on-policy GRPO loop on one machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (ApiKeyEnvOpt, HarnessOpt, MaxCallsOpt, MaxTokensOpt,
                                          MaxTurnsOpt, PriceOpt, TimeoutOpt, check_priced, episode_options,
                                          old_option, old_spelling, parse_prices, pick_harness, BackendOpt, DatasetOpt, FamilyOpt, FormatOpt, GroupsOpt, InstancesOpt,
                                          LimitOpt, NoPreflightOpt, OutputFormat, QuietOpt, SampleOpt, SampleSeedOpt,
                                          SliceOpt, config_of, emit_json, stderr_console, task_selection)

GroupOpt = Annotated[int, typer.Option("--group-size", "-G", min=1, help="Attempts per task (the GRPO group).")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", min=0.0, max=2.0, help="Sampling temperature of the policy.")]
NewTokensOpt = Annotated[Optional[int], typer.Option("--max-new-tokens", min=1, help="Cap on each model call's completion (default: the harness's own).")]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Episodes run in parallel.")]


def rollout(
    suite: Annotated[str, typer.Argument(metavar="SUITE", help="A registered suite ({suites}) or a data file.")],
    model: Annotated[Optional[str], typer.Option("--model", help="The policy: the model name --base-url serves (needed with a URL).")] = None,
    base_url: Annotated[Optional[list[str]], typer.Option("--base-url", help="OpenAI-compatible endpoint of --model that returns token ids and log-probabilities (orchard serve; vLLM). Repeat to spread attempts over several. Default: the embedded smollm2.")] = None,
    api_key_env: ApiKeyEnvOpt = None,
    harness: HarnessOpt = None,
    group_size: GroupOpt = 4,
    temperature: TemperatureOpt = 1.0,
    max_new_tokens: NewTokensOpt = None,
    out: Annotated[Path, typer.Option("--out", dir_okay=False, help="Rollouts file (JSONL, one line per episode); X.run/ goes beside it.")] = Path("rollouts.jsonl"),
    parquet: Annotated[Optional[Path], typer.Option("--parquet", dir_okay=False, help="Also write the rollouts as Parquet with verl's column names.")] = None,
    family: FamilyOpt = None,
    dataset: DatasetOpt = None,
    instances: InstancesOpt = None,
    group: GroupsOpt = None,
    limit: LimitOpt = None,
    slice_: SliceOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = None,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    timeout: TimeoutOpt = None,
    max_turns: MaxTurnsOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    price: PriceOpt = None,
    no_preflight: NoPreflightOpt = False,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
    policy_url: old_option("--policy-url", "--base-url", Optional[list[str]]) = None,
) -> None:
    """Roll out G attempts per task: token ids, log-probabilities, rewards, advantages for RL.

    Every attempt runs through the rollout core (sandbox, harness, recording proxy, grader); per
    episode the exact token ids the policy saw and produced, their log-probabilities, the loss mask,
    the reward and the group-normalized advantage go to --out (JSONL), and with --parquet to a file
    with verl's column names. Exit 3 when no episode can be trained on.

    \b
    Example:
      orchard rollout capitals --harness chat -G 8 --max-new-tokens 8 --out r.jsonl --parquet r.parquet
    """
    from orchard_cli.commands._progress import RunProgress
    from orchard_cli.preflight import Endpoint, check_endpoints
    from orchard_cli.rl.rollouts import RolloutConfig, Sampling, run_rollout

    base_url = old_spelling("--policy-url", "--base-url", policy_url, base_url)
    prices = parse_prices(price)
    check_priced(prices, [model or "smollm2"])

    selection = task_selection(suite, family=family, dataset=dataset, instances=instances, repo=None, limit=limit,
                               slice_=slice_, repo_mirror=None, groups=group, sample=sample, sample_seed=sample_seed)
    harness = pick_harness(harness, suite, family)
    config = config_of(RolloutConfig, selection=selection, policy_urls=list(base_url or []), model=model,
                       api_key_env=api_key_env, harness=harness, group_size=group_size,
                       sampling=Sampling(temperature=temperature, max_new_tokens=max_new_tokens),
                       workers=workers, backend=backend, out=str(out.resolve()),
                       parquet=str(parquet.resolve()) if parquet else None,
                       options=episode_options(timeout=timeout, max_turns=max_turns, max_calls=max_calls,
                                               max_tokens=max_tokens, price=prices.get(model or "smollm2")))
    console = stderr_console(quiet)
    for line in check_endpoints([Endpoint("--base-url", url, model, api_key_env) for url in base_url or []],
                                enabled=not no_preflight):
        console.print(f"  endpoint {line}", markup=False)
    done = [0, 0.0]
    with RunProgress("rollout", None, console=console, quiet=quiet, good="with reward") as progress:

        def on_group(group) -> None:  # type: ignore[no-untyped-def]
            done[0] += len(group)
            done[1] += sum(r.reward for r in group)
            progress.tick(count=len(group), resolved=sum(r.reward > 0 for r in group), error=False)
            progress.say(f"  {group[0].task_id}: rewards {[round(r.reward, 2) for r in group]} "
                         f"({done[0]} episodes, mean reward {done[1] / done[0]:.3f})")

        def on_planned(total: int) -> None:
            progress.total = total

        summary = run_rollout(config, on_group, on_planned)
    if fmt == OutputFormat.json:
        emit_json(summary.model_dump(mode="json"))
        return
    typer.echo(f"rollout: {summary.episodes} episodes of {summary.tasks} task(s) (G={group_size}, harness {harness}); "
               f"trainable {summary.trainable}; mean reward {summary.mean_reward} ({', '.join(summary.reward_kind)}); "
               f"{summary.groups_with_signal} group(s) with signal; {summary.policy_tokens} policy tokens; "
               f"{summary.episodes_per_s} episodes/s; wall {summary.wall_seconds:.1f} s")
    typer.echo(f"rollouts: {summary.out}" + (f"\nparquet: {summary.parquet} ({summary.parquet_rows} rows)"
                                             if summary.parquet else ""))
    if summary.untracked_calls:
        typer.echo(f"warning: {summary.untracked_calls} call(s) came back without token ids (the endpoint "
                   "ignores return_token_ids); they are not in the rollouts", err=True)


def plan_text(suite: str | None, tasks: int, offline: list[list], rollouts: Path | None, *, steps: int,
              tasks_per_step: int, group_size: int, harness: str) -> str:
    """What `orchard rl` is about to do, in the words of its source: a suite's tasks, or a
    rollouts file's own groups and group sizes (its options -G and --harness do not apply) and
    that the same rollouts come again every step."""
    if suite:
        return (f"{tasks} task(s) of {suite}: {steps} step(s) x {tasks_per_step} task(s) x G={group_size}, "
                f"harness {harness}")
    sizes = sorted({len(g) for g in offline})
    per_step = min(tasks_per_step, len(offline))
    again = steps * per_step > len(offline)
    return (f"{sum(map(len, offline))} rollouts from {rollouts} ({len(offline)} group(s), G={'/'.join(map(str, sizes))}): "
            f"{steps} step(s) x {per_step} group(s)"
            + (f"; the file holds {len(offline)} group(s), so each is trained on about "
               f"{steps * per_step / len(offline):.0f} times (offline GRPO: no new rollouts)" if again else ""))


def rl(
    suite: Annotated[Optional[str], typer.Argument(metavar="SUITE", help="Tasks to train on: a registered suite ({suites}) or a data file; omit with --rollouts.")] = None,
    out: Annotated[Path, typer.Option("--out", file_okay=False, help="Run folder: checkpoints, logs, the reward curve, the final model.")] = Path("rl-run"),
    model: Annotated[str, typer.Option("--model", help="The policy to start from: smollm2 or a checkpoint folder (what --base-url servers, when given, serve).")] = "smollm2",
    rollouts: Annotated[Optional[Path], typer.Option("--rollouts", dir_okay=False, help="Train on this rollouts file alone (from orchard rollout).")] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps (each on fresh rollouts).")] = 20,
    tasks_per_step: Annotated[int, typer.Option("--tasks-per-step", min=1, help="Tasks sampled per step.")] = 4,
    group_size: GroupOpt = 4,
    harness: HarnessOpt = None,
    temperature: TemperatureOpt = 1.0,
    max_new_tokens: NewTokensOpt = None,
    lr: Annotated[float, typer.Option("--lr", min=0.0, help="Learning rate (AdamW, constant).")] = 1e-5,
    beta: Annotated[float, typer.Option("--beta", min=0.0, help="KL weight to the starting model (0: none).")] = 0.0,
    epsilon: Annotated[float, typer.Option("--epsilon", min=0.0, max=0.99, help="Clip range of the ratio.")] = 0.2,
    loss_type: Annotated[str, typer.Option("--loss-type", help="dapo (TRL's default), grpo, bnpo or dr_grpo.")] = "dapo",
    updates: Annotated[int, typer.Option("--updates", min=1, help="Passes over each step's rollouts.")] = 1,
    eval_suite: Annotated[Optional[str], typer.Option("--eval-suite", help="Held-out tasks evaluated every --eval-every steps: a suite ({suites}).")] = None,
    eval_every: Annotated[int, typer.Option("--eval-every", min=0, help="Steps between evaluations (0: only at the end when --eval-suite).")] = 0,
    eval_attempts: Annotated[int, typer.Option("--eval-attempts", min=1, help="Sampled attempts per held-out task.")] = 4,
    eval_limit: Annotated[Optional[int], typer.Option("--eval-limit", min=1, help="At most this many held-out tasks (the first of the suite).")] = None,
    save_every: Annotated[int, typer.Option("--save-every", min=1, help="Steps between resumable checkpoints.")] = 5,
    max_turns: MaxTurnsOpt = None,
    timeout: TimeoutOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    price: PriceOpt = None,
    family: FamilyOpt = None,
    instances: InstancesOpt = None,
    group: GroupsOpt = None,
    limit: LimitOpt = None,
    slice_: SliceOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = None,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    seed: Annotated[int, typer.Option("--seed", help="Seeds the task order and the sampling.")] = 0,
    shuffle_rewards: Annotated[bool, typer.Option("--shuffle-rewards", help="Control run: rewards shuffled across each step's episodes.")] = False,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="Torch threads of the learner.")] = None,
    base_url: Annotated[Optional[list[str]], typer.Option("--base-url", help="A server orchard did not start (vLLM, SGLang, orchard serve) serving --model: rollouts call it and it gets the new weights after each update (--sync). Repeat for several. Default: the policy is served in this process.")] = None,
    sync: Annotated[Optional[str], typer.Option("--sync", help="With --base-url: lora (train a LoRA adapter, loaded through POST /v1/load_lora_adapter: vLLM --enable-lora, orchard serve --enable-lora) or checkpoint (the whole model, reloaded through POST /update_weights_from_disk: SGLang, orchard serve --enable-weight-updates).")] = None,
    lora_r: Annotated[int, typer.Option("--lora-r", min=1, help="LoRA rank (--sync lora).")] = 16,
    api_key_env: ApiKeyEnvOpt = None,
    shard: Annotated[str, typer.Option("--shard", help="Under torchrun: full (FSDP2, the default with several processes), grad-op, or none (DDP).")] = "auto",
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its latest checkpoint.")] = False,
    no_preflight: NoPreflightOpt = False,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
    policy_url: old_option("--policy-url", "--base-url", Optional[list[str]]) = None,
) -> None:
    """On-policy RL (GRPO): roll out, update, sync the served weights, repeat.

    Each step samples tasks, rolls out G attempts of each against the policy (served in this
    process, or by --base-url servers), updates with the clipped policy-gradient loss (TRL's GRPO
    loss), and syncs the new weights into the served policy (copied in place, or pushed with
    --sync); checkpoints, --resume, held-out evaluations with scorecards, a reward curve.

    \b
    Example:
      orchard rl capitals --harness chat --steps 20 -G 4 --max-new-tokens 8 --eval-suite capitals-heldout --out rl-run
    """
    from orchard_cli.errors import UsageError
    from orchard_cli.rl.learner import LearnerConfig
    from orchard_cli.rl.loop import RLConfig, check_options, plan_rl
    from orchard_cli.rl.rollouts import Sampling
    from orchard_cli.selection import TaskSelection

    base_url = old_spelling("--policy-url", "--base-url", policy_url, base_url)
    prices = parse_prices(price)
    check_priced(prices, [model])
    if loss_type not in ("dapo", "grpo", "bnpo", "dr_grpo"):
        raise UsageError(f"--loss-type {loss_type!r}: use dapo, grpo, bnpo or dr_grpo")
    if sync not in (None, "lora", "checkpoint"):
        raise UsageError(f"--sync {sync!r}: use lora or checkpoint")
    if shard not in ("auto", "full", "grad-op", "none"):
        raise UsageError(f"--shard {shard!r}: use full, grad-op or none")
    if not suite and (group or sample is not None or sample_seed is not None):
        raise UsageError("--group and --sample select a suite's tasks; with --rollouts the file's groups are trained on",
                         hint="name a SUITE, or drop --group/--sample")
    selection = task_selection(suite, family=family, dataset=None, instances=instances, repo=None, limit=limit,
                               slice_=slice_, repo_mirror=None, groups=group, sample=sample,
                               sample_seed=sample_seed) if suite else None
    harness = pick_harness(harness, suite, family)
    eval_selection = TaskSelection(suite=eval_suite, family=family, limit=eval_limit) if eval_suite else None
    learner = config_of(LearnerConfig, lr=lr, beta=beta, epsilon_low=epsilon, epsilon_high=epsilon,
                        loss_type=loss_type, updates=updates, threads=threads, shard=shard, lora=sync == "lora",
                        lora_r=lora_r, lora_alpha=2 * lora_r)
    config = config_of(RLConfig, selection=selection, eval_selection=eval_selection,
                       rollouts_file=str(rollouts.resolve()) if rollouts else None, model=model,
                       out=str(out.resolve()), harness=harness, steps=steps, tasks_per_step=tasks_per_step,
                       group_size=group_size, sampling=Sampling(temperature=temperature, max_new_tokens=max_new_tokens),
                       learner=learner, eval_every=eval_every if eval_suite else 0, eval_attempts=eval_attempts,
                       save_every=save_every, workers=workers, backend=backend, seed=seed,
                       shuffle_rewards=shuffle_rewards, resume=resume, policy_urls=list(base_url or []),
                       sync=sync, api_key_env=api_key_env,
                       options=episode_options(timeout=timeout, max_turns=max_turns, max_calls=max_calls,
                                               max_tokens=max_tokens, price=prices.get(model)))
    if eval_suite and not eval_every:
        config = config.model_copy(update={"eval_every": steps})
    import os

    from orchard_cli.commands._progress import RunProgress
    from orchard_cli.preflight import Endpoint, check_endpoints

    follower = os.environ.get("RANK", "0") != "0"
    console = stderr_console(quiet=quiet or follower)  # under torchrun, rank 0 speaks
    check_options(config)  # the options first, then the servers: before the run folder or the model is touched
    # --model is the checkpoint trained here, not a name the servers serve: they are asked only
    # to answer (the loop takes the name each one lists)
    checked = check_endpoints([Endpoint("--base-url", url, None, api_key_env) for url in base_url or []],
                              enabled=not no_preflight)
    run = plan_rl(config)
    plan = plan_text(suite, len(run.tasks), run.offline, rollouts, steps=steps, tasks_per_step=tasks_per_step,
                     group_size=group_size, harness=harness)
    console.print(f"[bold]orchard rl[/] {plan}, model {model}" + (" (resumed)" if run.state else "") + f"\n  run: {out}",
                  soft_wrap=True, highlight=False)
    for line in checked:
        console.print(f"  endpoint {line}", markup=False)

    with RunProgress("rl", steps - (run.state.step if run.state else 0), console=console,
                     quiet=quiet or follower, unit="step", good="steps with reward") as progress:

        def on_step(record) -> None:  # type: ignore[no-untyped-def]
            progress.tick(resolved=bool(record.mean_reward))
            gap = "" if record.logprob_gap is None else f", logprob gap {record.logprob_gap:.1e}"
            progress.say(f"  step {record.step}: mean reward {record.mean_reward}, loss {record.loss:+.4f}, "
                         f"grad {record.grad_norm:.3f}, rollout {record.rollout_seconds:.1f} s, update "
                         f"{record.update_seconds:.1f} s, sync {record.sync_seconds * 1000:.0f} ms{gap}")

        def on_eval(row) -> None:  # type: ignore[no-untyped-def]
            progress.say(f"  eval at step {row['step']}: held-out mean reward {row['mean_reward']:.3f} "
                         f"({row['episodes']} episodes)")

        summary = run.execute(on_step, on_eval)
    if not summary:  # another process of a torchrun: rank 0 reports
        return
    if fmt == OutputFormat.json:
        emit_json(summary)
        return
    typer.echo(f"rl: {summary['steps']} steps, {summary['episodes']} episodes; mean reward "
               f"{summary['first_mean_reward']} at step 1 -> {summary['last_mean_reward']} at the last step")
    for row in summary["evals"]:
        typer.echo(f"  held-out at step {row['step']}: {row['mean_reward']:.3f}")
    typer.echo(f"model: {summary['model']}" + (f"\nreward curve: {summary['reward_curve']}" if summary["reward_curve"] else ""))

"""Which solver a run's options ask for: `make_solver` (eval) and `agent_solver`.

Third-party solvers register a factory under the entry-point group `orchard.solvers`; it is called
as `factory(model=..., base_url=..., seed=...)` and returns an object with the members of
`solvers.Solver`. Any harness of `orchard_cli.harnesses` that is not a registered solver runs as
`agent.AgentSolver`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from orchard_cli.errors import UsageError
from orchard_cli.registry import Registry
from orchard_cli.rollout.solvers import EmptySolver, GoldSolver, PredictionsSolver, Solver

if TYPE_CHECKING:
    from orchard_cli.family import Family, Gold, RunOptions, Task
    from orchard_cli.rollout.user_model import UserConfig
    from orchard_cli.rollout.agent import Price

solvers: Registry = Registry("harness", "orchard.solvers", {})


def make_solver(*, predictions: str | None, harness: str | None, model: str | None, base_url: str | None,
                seed: int | None, family: "Family", tasks: list["Task"], options: "RunOptions | None" = None,
                max_turns: int | None = None, timeout: float | None = None,
                max_calls: int | None = None, max_tokens: int | None = None, price: "Price | None" = None,
                api_key_env: str | None = None, suite_ids: Callable[[], set[str]] | None = None, user: "UserConfig | None" = None,
                suite_tasks: Callable[[], list["Task"]] | None = None) -> Solver:
    """The solver a run asks for; every problem is a one-line UsageError. A predictions file may
    hold more of the suite than the selected tasks (`suite_ids()`, the whole suite's ids): those
    lines are left aside, as the official harness does; an id the suite lacks is refused."""
    if predictions and (harness or model):
        raise UsageError("give either --predictions or --model/--harness, not both")
    if user is not None and predictions:
        raise UsageError("--user-model answers an agent: it needs --model/--harness, not --predictions")
    if predictions == "gold":
        require_references(family, tasks, suite_tasks=suite_tasks, options=options)
        return GoldSolver()
    if predictions == "empty":
        return EmptySolver()
    if predictions:
        from pathlib import Path

        from orchard_cli.runs.predictions import load_predictions
        from orchard_cli.registry import did_you_mean

        if not Path(predictions).is_file():  # a misspelt gold/empty is not a file either
            named = Path(predictions).name
            raise UsageError(f"--predictions {named}: no such file{did_you_mean(named, ('gold', 'empty'))}",
                             hint="--predictions gold, empty, or a predictions file (JSONL/JSON)")

        if family.grading != "fresh":
            raise UsageError(f"--predictions FILE holds patches; the {family.name} family is not graded on a patch",
                             hint="use --predictions gold|empty, or an agent: --model/--harness")
        selected = {t.task_id for t in tasks}
        chosen = load_predictions(predictions)
        others = set(chosen) - selected
        if others:
            known = suite_ids() if suite_ids else selected
            if others - known:  # read again only to name the stranger's line
                load_predictions(predictions, known, "the suite" if suite_ids else "the selected tasks")
            chosen = {k: v for k, v in chosen.items() if k in selected}
        return PredictionsSolver(predictions, chosen)
    if harness or model:
        kind = plays_references(base_url)
        if kind:
            require_references(family, tasks, f"the demonstrator --base-url {base_url}", options=options, kind=kind)
        return agent_solver(harness, model, base_url, seed, max_turns=max_turns, timeout=timeout, user=user,
                            max_calls=max_calls, max_tokens=max_tokens, price=price, api_key_env=api_key_env)
    raise UsageError("nothing to evaluate: say where the answers come from",
                     hint="--predictions gold|empty|PATH, or --model NAME --base-url URL --harness NAME")


def require_references(family: "Family", tasks: list["Task"], who: str = "--predictions gold",
                       suite_tasks: Callable[[], list["Task"]] | None = None,
                       options: "RunOptions | None" = None, kind: str = "gold") -> None:
    """A one-line UsageError naming the tasks without a reference solution (`kind` gold; near_miss:
    a near miss), and the suite's tasks that have one, before anything runs (`who` plays them:
    --predictions gold, --base-url gold, --base-url near-miss)."""
    lacking = [t.task_id for t in tasks if reference(family, t, options, kind) is None]
    if lacking or not tasks:
        message, hint = _no_gold(family, tasks, lacking, suite_tasks, options, kind)
        raise UsageError(f"{who} plays reference solutions: {message}", hint=hint)


def plays_references(base_url: str | None) -> str | None:
    """The kind of reference (`gold`, `near_miss`: EpisodeEnv.reference) the in-package endpoint
    `base_url` plays for each task (gold, near-miss); None for any other endpoint."""
    from orchard_cli.models import endpoints

    if not base_url or base_url.startswith(("http://", "https://")) or base_url not in endpoints.names():
        return None
    try:
        endpoint = endpoints.load(base_url)
    except Exception:  # noqa: BLE001 - an endpoint that cannot load is refused later, by name
        return None
    return getattr(endpoint, "plays", "gold") if getattr(endpoint, "wants_episode", False) else None


def reference(family: "Family", task: "Task", options: "RunOptions | None", kind: str) -> "Gold | None":
    """A task's reference solution (`gold` or `near_miss`), read off a new episode of it (nothing
    is reserved before `spec`, so this costs no sandbox)."""
    from orchard_cli.family import RunOptions
    from orchard_cli.seam_v1 import adapt

    with adapt(family).episode(task, options or RunOptions()) as episode:
        return episode.reference(kind)  # type: ignore[arg-type]


def user_config(model: str | None, base_url: str | None, key_env: str | None) -> "UserConfig | None":
    """`--user-model M --user-base-url U [--user-key-env V]`, checked; None without --user-model."""
    if model is None:
        if base_url or key_env:
            raise UsageError("--user-base-url and --user-key-env go with --user-model")
        return None
    if not base_url:
        raise UsageError("--user-model needs --user-base-url (the user model's OpenAI-compatible endpoint)")
    from orchard_cli.rollout.user_model import UserConfig

    return UserConfig(model=model, base_url=base_url, key_env=key_env)


def _no_gold(family: "Family", tasks: list["Task"], lacking: list[str],
             suite_tasks: Callable[[], list["Task"]] | None,
             options: "RunOptions | None" = None, kind: str = "gold") -> tuple[str, str | None]:
    """(message, hint) for --predictions gold over tasks without a gold solution: which of the
    selection lack one, and the suite's tasks that have one (to pick with --instances)."""
    having = [t.task_id for t in tasks if t.task_id not in set(lacking)]
    if not having and suite_tasks is not None:
        try:
            having = [t.task_id for t in suite_tasks() if reference(family, t, options, kind) is not None]
        except Exception:  # naming them is a courtesy; the refusal stands
            having = []
    shown = f"{', '.join(lacking[:5])}{', ...' if len(lacking) > 5 else ''}"
    what = "near miss" if kind == "near_miss" else "gold solution"
    message = (f"{len(lacking)} of the {len(tasks)} selected tasks have no {what} ({shown})"
               if len(lacking) < len(tasks) else
               f"none of the {len(tasks)} selected {family.name} task(s) has a {what} ({shown})")
    if not having:
        return message + f"; the {family.name} family has none here", None
    message += f"; {len(having)} of the suite's tasks have one: {', '.join(having[:12])}{', ...' if len(having) > 12 else ''}"
    return message, f"--instances {','.join(having[:12])}"


def agent_solver(harness: str | None, model: str | None, base_url: str | None, seed: int | None, *,
                 max_turns: int | None = None, timeout: float | None = None,
                 user: "UserConfig | None" = None, max_calls: int | None = None, max_tokens: int | None = None,
                 price: "Price | None" = None, api_key_env: str | None = None) -> Solver:
    """An agent harness driving a model (a registered solver, or any harness via the proxy)."""
    if not harness or not model:
        raise UsageError("an agent run needs both --model NAME and --harness NAME",
                         hint="or grade existing patches with --predictions gold|empty|PATH")
    if harness in solvers.names():
        if user is not None:
            raise UsageError(f"--user-model needs one of orchard's multi-turn harnesses, not the solver {harness!r}")
        factory = solvers.load(harness)
        return factory(model=model, base_url=base_url, seed=seed)
    from orchard_cli.rollout.agent import AgentSolver

    limits = {k: v for k, v in (("max_turns", max_turns), ("timeout_seconds", timeout), ("max_calls", max_calls),
                                ("max_tokens", max_tokens), ("price", price)) if v is not None}
    from orchard_cli.rollout.user_model import UserModel

    solver = AgentSolver(harness, model=model, base_url=base_url, seed=seed, api_key_env=api_key_env,
                         user=UserModel(user) if user is not None else None)
    if limits:
        solver.options = solver.options.model_copy(update=limits)
    return solver

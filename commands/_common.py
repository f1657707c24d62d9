"""Options shared by several commands, declared once, and output helpers."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Optional

import typer


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="text for people, json for scripts.")]
BackendOpt = Annotated[str, typer.Option("--backend", "-b", help="Sandbox backend: {backends}.")]


def emit_json(data: Any) -> None:
    """Results go to stdout; everything else to stderr."""
    typer.echo(json.dumps(data, indent=2, default=str))


def stderr_console(quiet: bool = False):
    """Talk for people. Lines are never wrapped mid-word when stderr is a pipe or a file (CI
    logs, `| tee`): soft wrap, the reader's terminal folds them."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, quiet=quiet, soft_wrap=True)


def stdout_console():
    from rich.console import Console

    return Console(highlight=False)


NoPreflightOpt = Annotated[bool, typer.Option("--no-preflight", help="Do not ask each model endpoint once before the run (for a server that answers neither GET /models nor a 1-token chat call).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (errors and the result only).")]


# ---- the task selection, declared once (eval, distill, rollout, rl, tasks ls/validate) ----------

DatasetOpt = Annotated[Optional[str], typer.Option("--dataset", "--source", help="A data file (or hub id) instead of the suite's own; for claw-eval, the benchmark's checkout (--source PATH).")]
FamilyOpt = Annotated[Optional[str], typer.Option("--family", help="The task family whose format a data-file suite is in: {families} (default: swe, SWE-bench's format).")]
InstancesOpt = Annotated[Optional[str], typer.Option("--instances", help="Comma-separated instance ids.")]
RepoOpt = Annotated[Optional[str], typer.Option("--repo", help="Only instances of this repository (owner/name).")]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", min=1, help="At most this many instances: the first N of the suite (one family's suite is often ordered by category).")]
SliceOpt = Annotated[Optional[str], typer.Option("--slice", help="Instances A:B of the selection (Python slice).")]
GroupsOpt = Annotated[Optional[list[str]], typer.Option("--group", metavar="KEY=VALUE", help="Only tasks whose family grouping KEY is VALUE (claw: category, difficulty; SWE: repo); repeatable: several values of one key are any of them, different keys all of them.")]
SampleOpt = Annotated[Optional[int], typer.Option("--sample", min=1, help="N tasks spread evenly over the family's groupings, seeded by --sample-seed (the same seed, the same tasks).")]
SampleSeedOpt = Annotated[Optional[int], typer.Option("--sample-seed", help="The seed of --sample (default 0).")]
UserModelOpt = Annotated[Optional[str], typer.Option("--user-model", help="The model that plays a multi-turn task's user (Claw-Eval's C* tasks); needs --user-base-url and a multi-turn harness.")]
UserBaseUrlOpt = Annotated[Optional[str], typer.Option("--user-base-url", help="The user model's OpenAI-compatible endpoint (…/v1).")]
UserKeyEnvOpt = Annotated[Optional[str], typer.Option("--user-key-env", help="Environment variable holding the user model's key (default OPENAI_API_KEY when set).")]
NetworkOpt = Annotated[str, typer.Option("--network", help="none, or full: tasks that browse or search the live web run (live-web suites, Claw-Eval's web_real); SWE instances are graded with the network, as the official harness grades.")]
ImageMapOpt = Annotated[Optional[list[str]], typer.Option("--image-map", metavar="SRC=DST", help="Harbor tasks: build on DST where a Dockerfile names the base image SRC (e.g. ubuntu:24.04=orchard/base:bookworm); repeatable; recorded in the run's config and scorecard.")]
RepoMirrorOpt = Annotated[Optional[str], typer.Option("--repo-mirror", help="Folder of local git mirrors of the repositories.")]


def selection_fields(suite: str, *, family: str | None, dataset: str | None, instances: str | None,
                     repo: str | None, limit: int | None, slice_: str | None,
                     repo_mirror: str | None, network: str = "none",
                     image_map: list[str] | None = None, groups: list[str] | None = None,
                     sample: int | None = None, sample_seed: int | None = None) -> dict[str, Any]:
    """The selection options as config fields: files made absolute, ids split, the slice and the
    groups checked (a group KEY the family lacks is refused when the suite is opened)."""
    import re
    from pathlib import Path

    from orchard_cli.errors import UsageError
    from orchard_cli.selection import parse_groups
    from orchard_cli.tasks.harbor.environment import parse_image_map

    if sample_seed is not None and sample is None:
        raise UsageError("--sample-seed seeds --sample N; add --sample N (or drop --sample-seed)")
    if network not in ("none", "full"):
        raise UsageError(f"--network {network!r}: use none or full")
    if slice_ is not None and not re.fullmatch(r"-?\d*:-?\d*", slice_.strip()):
        raise UsageError(f"--slice {slice_!r} is not A:B (for example 0:50)")
    if repo_mirror and not Path(repo_mirror).is_dir():  # now, not after the run folder exists
        raise UsageError(f"--repo-mirror {repo_mirror}: no such folder",
                         hint="a folder of git clones or bare mirrors named owner/name(.git)")
    path = Path(suite)
    # absolute, never resolved: a data file that is a link stays the link, for the guarded loader to
    # judge (resolving it here would hand the loader the file outside that the link points at)
    return {
        "suite": str(path.absolute()) if path.suffix in (".json", ".jsonl", ".parquet") and path.exists() else suite,
        "family": family, "dataset": str(Path(dataset).absolute()) if dataset and Path(dataset).exists() else dataset,
        "instances": [i.strip() for i in instances.split(",") if i.strip()] if instances else None,
        "repo": repo, "limit": limit, "slice": slice_,
        "repo_mirror": str(Path(repo_mirror).absolute()) if repo_mirror else None,
        "network": network,
        "image_map": parse_image_map(image_map),
        "groups": parse_groups(groups), "sample": sample, "sample_seed": sample_seed or 0,
    }


def task_selection(suite: str, **options: Any) -> Any:
    """The `TaskSelection` of the selection options (`selection_fields`' arguments; rollout, rl,
    tasks): what eval and distill record flat in their configs."""
    from orchard_cli.selection import TaskSelection

    fields = selection_fields(suite, **options)
    fields.pop("network")
    return TaskSelection(**fields)


def default_command_group(default: str, usage: str):  # type: ignore[no-untyped-def]
    """A Typer group where `orchard GROUP ARGS` means `orchard GROUP DEFAULT ARGS` unless ARGS
    starts with one of its subcommands (`orchard eval SUITE` is `orchard eval run SUITE`)."""
    from typer.core import TyperGroup

    class DefaultGroup(TyperGroup):
        def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
            if (not args and self.no_args_is_help) or (len(args) == 1 and args[0] in ("--help", "-h")):
                args = [default, "--help"]  # the help people need: the default command's options
            elif not args or args[0] not in self.commands:
                args = [default, *args]
            return super().parse_args(ctx, args)

        def collect_usage_pieces(self, ctx):  # type: ignore[no-untyped-def]
            return [usage]

    return DefaultGroup


def config_of(kind: Any, **fields: Any) -> Any:
    """A typed config from command-line values; a value the config refuses is a one-line usage
    error naming the flag (never a pydantic dump, never exit 3)."""
    from pydantic import ValidationError

    from orchard_cli.errors import UsageError

    try:
        return kind(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "a value"
        raise UsageError(f"{flag}: {first['msg']} (got {first.get('input')!r})") from None


IN_PROCESS_WORKERS = 3
"""Episodes run at once by default when the model is served in this process: its continuous
batching decodes their calls together (bench/serve_batch_bench.py: 3.5x the tokens/s at 8)."""


def default_workers(workers: int | None, endpoint: str | None) -> int:
    """--workers as given, else IN_PROCESS_WORKERS where `endpoint` (a --base-url, or eval's
    --model when no --base-url is given) is served in this process (smollm2, local, a checkpoint
    folder), else 1 (a remote endpoint's limits are the user's to choose)."""
    if workers is not None:
        return workers
    from pathlib import Path

    in_process = endpoint in ("smollm2", "local") or bool(endpoint and "/" in endpoint and
                                                        not endpoint.startswith(("http://", "https://")) and
                                                        Path(endpoint).is_dir())
    return IN_PROCESS_WORKERS if in_process else 1


# ---- one vocabulary: the defaults and run limits of an episode, declared once --------------------
# (eval, distill, rollout, rl). The numbers are EpisodeOptions' own defaults (rollout/agent.py):
# the limits are ceilings, so the one default is the generous one the agent commands had.

HarnessOpt = Annotated[Optional[str], typer.Option("--harness", help="The agent harness that drives --model: {harnesses} (default: the one the suite's family is made for: chat for quiz suites like capitals, web for browser tasks, else bash).")]


def pick_harness(harness: str | None, suite: str | None, family: str | None) -> str:
    """--harness, else the one the suite's family declares (`Family.harness`). A suite that does
    not resolve gets bash here: the run's own checks then refuse it with their message."""
    if harness:
        return harness
    from orchard_cli.errors import OrchardError
    from orchard_cli.families import family_harness
    from orchard_cli.selection import TaskSelection

    try:
        return family_harness(TaskSelection(suite=suite, family=family)) if suite else "bash"
    except (OrchardError, ValueError):
        return "bash"
ModelBaseUrlOpt = Annotated[Optional[str], typer.Option("--base-url", help="The OpenAI-compatible endpoint of --model (…/v1), or an in-package endpoint (smollm2, scripted); default: the embedded smollm2.")]
ApiKeyEnvOpt = Annotated[Optional[str], typer.Option("--api-key-env", help="Environment variable holding the --base-url endpoint's key (default OPENAI_API_KEY when set).")]
TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", min=1, help="Seconds one episode's harness run may take (default 1800).")]
MaxTurnsOpt = Annotated[Optional[int], typer.Option("--max-turns", min=1, help="Turn limit handed to the harness (default 50).")]
MaxCallsOpt = Annotated[Optional[int], typer.Option("--max-calls", min=1, help="Model calls allowed per episode, enforced by the recording proxy (default 100).")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="Tokens (in + out) allowed per episode, enforced by the recording proxy (default: no cap).")]
PriceOpt = Annotated[Optional[list[str]], typer.Option("--price", metavar="MODEL=IN,OUT", help="USD per million tokens of MODEL (in, out), for the run's cost (otherwise unknown); repeatable.")]


def parse_prices(values: list[str] | None) -> dict[str, Any]:
    """`--price MODEL=IN,OUT` (repeatable) as model -> Price; a malformed value is a usage error."""
    from orchard_cli.errors import UsageError
    from orchard_cli.rollout.agent import Price

    prices = {}
    for value in values or ():
        model, _, pair = value.rpartition("=")
        try:
            inp, out = (float(x) for x in pair.split(","))
            prices[model] = Price(input_per_mtok=inp, output_per_mtok=out)
        except ValueError:
            raise UsageError(f"--price {value!r} is not MODEL=IN,OUT (USD per million tokens, e.g. gpt-x=0.3,1.2)") from None
        if not model:
            raise UsageError(f"--price {value!r} names no model (MODEL=IN,OUT)")
    return prices


def check_priced(prices: dict[str, Any], models: list[str], what: str = "--model") -> None:
    """Every `--price` names a model the run uses."""
    from orchard_cli.errors import UsageError

    unknown = sorted(set(prices) - set(models))
    if unknown:
        raise UsageError(f"--price names a model the run does not use: {', '.join(unknown)}",
                         hint=f"price the {what} of the run: {', '.join(models) or '(none named)'}")


def episode_options(*, timeout: float | None, max_turns: int | None, max_calls: int | None,
                    max_tokens: int | None, price: Any = None) -> Any:
    """The limits of every episode of a run: a limit not given keeps EpisodeOptions' default."""
    from orchard_cli.rollout.agent import EpisodeOptions

    given = {"timeout_seconds": timeout, "max_turns": max_turns, "max_calls": max_calls,
             "max_tokens": max_tokens, "price": price}
    return EpisodeOptions(**{k: v for k, v in given.items() if v is not None})


# ---- old spellings: one note, declared once -------------------------------------------------------

def old_spelling(old: str, new: str, value: Any, current: Any = None) -> Any:
    """The value of a renamed flag given under its old name `old`: a one-line note on stderr, and
    the value (`current`, the new flag's, when the old one was not given). Both at once is refused."""
    if value is None or value == []:
        return current
    if current is not None and current != []:
        from orchard_cli.errors import UsageError

        raise UsageError(f"{old} is the old spelling of {new}: give {new} alone")
    typer.echo(f"note: {old} is now {new}; the old spelling still works, and a later release drops it",
               err=True)
    return value


def old_option(old: str, new: str, kind: Any = Optional[str], **checks: Any) -> Any:
    """A hidden option under the old name of a renamed flag (read with `old_spelling`); `checks`
    (min, max) as the new flag's."""
    return Annotated[kind, typer.Option(old, hidden=True, help=f"Old spelling of {new}.", **checks)]


OldSuiteOpt = old_option("--suite", "the SUITE argument")

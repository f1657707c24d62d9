"""`orchard tasks ls [SUITE]` and `orchard tasks show NAME`: the task registry, for people and scripts."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from orchard_cli.commands._common import (DatasetOpt, FamilyOpt, FormatOpt, GroupsOpt, LimitOpt, OutputFormat, RepoOpt,
                                          SampleOpt, SampleSeedOpt, emit_json, stdout_console)
from orchard_cli.commands.claw_tasks import validate_command
from orchard_cli.commands.synth import synth_command

app = typer.Typer(help="Task suites and families: what `orchard eval` and `orchard distill` can run.",
                  no_args_is_help=True)



def _suites_row(s: Any) -> dict[str, Any]:
    return {"name": s.name, "family": s.family, "source": s.source, "split": s.split,
            "data_file": s.data_file, "description": s.description}


def _suites() -> list[dict[str, Any]]:
    from orchard_cli.families import list_suites

    return [_suites_row(s) for s in list_suites()]


def _load(name: str, dataset: str | None, family: str | None = None, **filters: Any):  # type: ignore[no-untyped-def]
    """The family and the suite as selected (its provenance the whole suite's)."""
    from orchard_cli.families import open_suite
    from orchard_cli.selection import TaskSelection

    named = {k: v for k, v in filters.items() if v is not None}
    return open_suite(TaskSelection(suite=name, dataset=dataset, family=family, **named))


@app.command("ls")
def ls(
    suite: Annotated[Optional[str], typer.Argument(metavar="SUITE", help="List this suite's instances instead of the suites ({suites}).")] = None,
    dataset: DatasetOpt = None,
    family: FamilyOpt = None,
    repo: RepoOpt = None,
    group: GroupsOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = None,
    limit: LimitOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Suites and task families; with SUITE, that suite's instances.

    \b
    Example:
      orchard tasks ls            # every suite; orchard tasks ls claw-mini: its tasks
    """
    if suite is None:
        from orchard_cli.families import families

        data = {"suites": _suites(), "families": families.names()}
        if fmt == OutputFormat.json:
            emit_json(data)
            return
        from rich.table import Table

        table = Table(title="suites", title_justify="left")
        for column in ("suite", "family", "source", "description"):
            table.add_column(column)
        for s in data["suites"]:
            table.add_row(s["name"], s["family"], s["source"], s["description"])
        stdout_console().print(table)
        typer.echo(f"families: {', '.join(data['families'])}")
        typer.echo("a data file works as a suite too: SWE-bench format (.parquet, .jsonl, .json), "
                   "or another family's with --family NAME")
        return
    from orchard_cli.commands._common import task_selection
    from orchard_cli.families import open_suite

    loaded, selected = open_suite(task_selection(suite, family=family, dataset=dataset, instances=None, repo=repo,
                                                 limit=limit, slice_=None, repo_mirror=None, groups=group,
                                                 sample=sample, sample_seed=sample_seed))
    rows = [{"instance_id": t.task_id, "repo": t.repo, "family": t.family, "groups": loaded.groups(t)}
            for t in selected.tasks]
    if fmt == OutputFormat.json:
        emit_json({"suite": suite, **selected.provenance, "instances": rows})
        return
    for row in rows:
        groups = ",".join(f"{k}={v}" for k, v in row["groups"].items() if k != "repo")
        typer.echo(f"{row['instance_id']}\t{row['repo']}" + (f"\t{groups}" if groups else ""))


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A suite ({suites}) or a data file.")],
    instances: Annotated[Optional[str], typer.Option("--instances", help="Comma-separated instance ids to show.")] = None,
    dataset: DatasetOpt = None,
    family: FamilyOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """A suite (family, source, instance count, repositories), or the instances named.

    \b
    Example:
      orchard tasks show claw-mini
    """
    from orchard_cli.errors import OrchardError, UsageError
    from orchard_cli.families import find_suite, is_file_suite, resolve
    from orchard_cli.selection import TaskSelection

    ids = [i.strip() for i in instances.split(",") if i.strip()] if instances else None
    if ids:
        loaded, selected = _load(name, dataset, family, instances=ids)
        shown = [loaded.describe(t) for t in selected.tasks]
        if fmt == OutputFormat.json:
            emit_json(shown if len(shown) > 1 else shown[0])
            return
        for item in shown:
            statement = item.pop("problem_statement", "")
            for key, value in item.items():
                if isinstance(value, list):
                    value = f"{len(value)}: " + ", ".join(value[:5]) + (" ..." if len(value) > 5 else "")
                typer.echo(f"{key:>17}: {value}")
            typer.echo("\n" + statement.strip() + "\n")
        return
    info = find_suite(name)
    if info is None and not is_file_suite(name):  # the same rule as `tasks ls NAME`: exit 2
        resolve(TaskSelection(suite=name, family=family))
    data: dict[str, Any] = {"name": name, **({k: v for k, v in _suites_row(info).items() if k != "name"} if info
                                            else {"family": family or "swe", "source": name})}
    try:
        loaded, selected = _load(name, dataset, family)
        tasks = selected.tasks
        repos: dict[str, int] = {}
        for t in tasks:  # the family's first grouping (SWE: the repository; claw: the category)
            group = next(iter(loaded.groups(t).values()), t.repo) or "(none)"
            repos[group] = repos.get(group, 0) + 1
        data.update(instances=len(tasks), **selected.provenance,
                    repos=dict(sorted(repos.items(), key=lambda kv: (-kv[1], kv[0]))))
    except UsageError:
        raise  # a data file that is not one: bad input, exit 2
    except OrchardError as exc:  # the suite is known but its data cannot be had here (no hub)
        data.update(instances=None, unavailable=exc.message, hint=exc.hint)
    if fmt == OutputFormat.json:
        emit_json(data)
        return
    for key in ("name", "family", "description", "source", "split", "data_file", "instances", "dataset_sha256"):
        if data.get(key) is not None:
            typer.echo(f"{key:>15}: {data[key]}")
    if data.get("unavailable"):
        typer.echo(f"{'data':>15}: unavailable: {data['unavailable']}")
        if data.get("hint"):
            typer.echo(f"{'':>15}  hint: {data['hint']}")
    for repo, count in (data.get("repos") or {}).items():
        typer.echo(f"{'':>15}  {count:>4}  {repo}")


app.command("synth")(synth_command)
app.command("validate")(validate_command)

"""What the viewer reads: a run, as a list of episodes and, per episode, what it left on disk.

A source is looked up by what the path is (`open_source`): each registered reader says whether it
takes a path (`detect`), the first that does reads it. orchard's own:

    eval-run      an `orchard eval` run folder: results.jsonl (every attempt, gold and empty
                  runs included), scorecard.json, tasks.jsonl, trajectories.jsonl (agent runs),
                  logs/<task>/attempt-<k>/ (evidence, verdict, test output, step screenshots)
    trajectories  a trajectories file (`orchard distill --out`, an eval run's trajectories.jsonl),
                  or a distill run folder `X.run/` (its X.jsonl beside it): each episode's record,
                  and its log folder when the run folder is there

Other formats (ATIF trajectories) plug in as another reader: a class with `detect(path)` and the
`Source` methods, registered under the `orchard.viewers` entry-point group.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchard_cli.errors import UsageError
from orchard_cli.registry import Registry
from orchard_cli.trajectory import Trajectory


@dataclass
class Entry:
    """One episode as the list shows it, and where its detail is."""

    key: str
    task: str
    attempt: int
    category: str
    resolved: bool = False
    model: str = ""
    groups: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    tokens: int | None = None
    cost: float | None = None
    calls: int | None = None
    steps: int | None = None
    score: float | None = None
    error: str | None = None
    log_dir: Path | None = None
    prompt: str = ""
    judge: dict[str, Any] | None = None
    trajectory: Trajectory | None = None
    """The episode's record when the source has one (agent runs); read one at a time."""


class Source(Protocol):
    """A run the viewer can show."""

    title: str
    path: Path

    def scorecard(self) -> dict[str, Any] | None:
        """scorecard.json's content (None when the run has none: a trajectories file)."""

    def categories(self) -> dict[str, dict[str, str]]:
        """Category -> {label, color}: the family's own verdict names and colours."""

    def entries(self) -> Iterator[Entry]:
        """Every episode, in the run's order; `trajectory` filled when there is one."""

    def images(self) -> Path | None:
        """The folder `orchard-image:` references in model calls resolve against."""


readers: Registry[Any] = Registry("run reader", "orchard.viewers", {
    "eval-run": "orchard_cli.viewer.sources:EvalRunSource",
    "trajectories": "orchard_cli.viewer.sources:TrajectoriesSource",
})


def open_source(path: str | Path) -> Source:
    """The source for `path`: the first reader that takes it; else a one-line UsageError."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such run folder or trajectories file",
                         hint="pass an `orchard eval` run folder (runs/...) or a trajectories .jsonl file")
    for name in readers.names():
        kind = readers.load(name)
        if kind.detect(path):
            return kind(path)
    raise UsageError(f"{path} is neither an orchard eval run folder (results.jsonl), a distill run folder "
                     "(X.run/ beside X.jsonl) nor a trajectories file",
                     hint="pass the --out of `orchard eval` or `orchard distill`")


def _categories_of(card: dict[str, Any] | None) -> dict[str, dict[str, str]]:
    from orchard_cli.outcome import category_info
    from orchard_cli.scoring.scorecard import LEGACY_CATEGORIES

    known = dict((card or {}).get("categories") or {})
    out = {k: {"label": v.label, "color": v.color} for k, v in LEGACY_CATEGORIES.items()}
    for name, info in known.items():
        out[name] = {"label": info.get("label", name), "color": info.get("color", category_info(name).color)}
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class EvalRunSource:
    """An `orchard eval` run folder."""

    @property
    def family(self) -> str | None:
        return (self._card or {}).get("family")

    def __init__(self, path: Path) -> None:
        from orchard_cli.runs import RunFolder

        self.path = Path(path).resolve()
        self.folder = RunFolder(self.path)
        config = _read_json(self.folder.config) or {}
        self._card = _read_json(self.folder.scorecard)
        suite = (self._card or {}).get("suite") or config.get("suite") or self.path.name
        self.title = f"{Path(str(suite)).name} · {(self._card or {}).get('source') or config.get('source') or ''}"

    @staticmethod
    def detect(path: Path) -> bool:
        from orchard_cli.runs import RunFolder

        return path.is_dir() and RunFolder(path).is_run()

    def scorecard(self) -> dict[str, Any] | None:
        return self._card

    def categories(self) -> dict[str, dict[str, str]]:
        return _categories_of(self._card)

    def images(self) -> Path | None:
        from orchard_cli.images import images_dir

        return images_dir(self.folder.trajectories)

    def entries(self) -> Iterator[Entry]:
        from orchard_cli.records import iter_jsonl

        prompts = {}
        for task in iter_jsonl(self.folder.tasks):
            prompts[str(task.get("task_id"))] = str(task.get("problem_statement") or "")
        by_key: dict[str, Entry] = {}
        order: list[str] = []
        for r in self.folder.latest_results():
            key = r.episode_id or f"{r.instance_id}#{r.attempt}"
            by_key[key] = Entry(
                key=key, task=r.instance_id, attempt=r.attempt, category=r.category, resolved=r.resolved,
                model=r.model or "", groups=dict(r.groups) or ({"repo": r.repo} if r.repo else {}),
                seconds=r.duration_seconds, tokens=None if r.tokens_in is None else (r.tokens_in or 0) + (r.tokens_out or 0),
                cost=r.cost_usd, steps=r.steps, score=r.score, error=r.error,
                log_dir=(self.path / r.log_dir) if r.log_dir else None, prompt=prompts.get(r.instance_id, ""),
                judge=r.judge)
            order.append(key)
        trajectories = self.folder.trajectories
        shown: set[str] = set()
        if trajectories.is_file():  # agent runs: each episode's record, streamed (a line at a time)
            for row in iter_jsonl(trajectories):
                try:
                    record = Trajectory.model_validate(row)
                except ValueError:
                    continue
                entry = by_key.get(record.episode_id)
                if entry is None or record.episode_id in shown:
                    continue
                entry.trajectory, entry.calls = record, len(record.calls)
                entry.prompt = entry.prompt or record.problem_statement
                shown.add(record.episode_id)
                yield entry
                entry.trajectory = None  # not kept: 10,000 episodes' calls do not fit in memory
        for key in order:
            if key not in shown:
                yield by_key[key]


class TrajectoriesSource:
    """A trajectories file, or a distill run folder (`X.run/`, its trajectories `X.jsonl`)."""

    def __init__(self, path: Path) -> None:
        path = Path(path).resolve()
        if path.is_dir():
            path = path.with_name(path.name.removesuffix(".run") + ".jsonl")
        self.path = path
        self.run_dir = path.with_name(path.stem + ".run")
        self.title = path.name
        if path.suffix == ".json":  # an ATIF trajectory: checked whole now (one line when it is not one)
            from orchard_cli.trajectory import read_atif

            self.family = read_atif(path).family
            return
        with path.open("rb") as fh:  # a file of something else is one line now, not an empty site
            head = fh.readline(1 << 20)
        try:
            first = json.loads(head) if head.strip() else None
        except ValueError:
            first = None
        self.family = str(first.get("family") or "swe") if isinstance(first, dict) else None
        if not isinstance(first, dict) or "episode_id" not in first:
            raise UsageError(f"{path} holds no trajectories (its first line is not a trajectory record)",
                             hint="pass a file written by `orchard distill` or an eval run's trajectories.jsonl, "
                                  "or the eval run folder itself")

    @staticmethod
    def detect(path: Path) -> bool:
        if path.is_dir():
            return path.name.endswith(".run") and path.with_name(path.name.removesuffix(".run") + ".jsonl").is_file()
        return path.is_file() and path.suffix in (".jsonl", ".json")  # .json: an ATIF trajectory

    def scorecard(self) -> dict[str, Any] | None:
        return None

    def categories(self) -> dict[str, dict[str, str]]:
        return _categories_of(None)

    def images(self) -> Path | None:
        from orchard_cli.images import images_dir

        return images_dir(self.path)

    def entries(self) -> Iterator[Entry]:
        from orchard_cli.trajectory import read_trajectories

        for t in read_trajectories(self.path):
            logs = self.run_dir / "logs" / t.episode_id
            screenshots = [d.tool for d in (t.evidence.dispatches if t.evidence else [])]
            yield Entry(key=t.episode_id, task=t.task_id, attempt=t.attempt, category=t.outcome.category,
                        resolved=t.outcome.resolved, model=t.model,
                        groups={"repo": str(t.metadata["repo"])} if t.metadata.get("repo") else {},
                        seconds=t.duration_seconds, tokens=t.tokens_in + t.tokens_out, cost=t.cost_usd,
                        calls=len(t.calls), steps=len(screenshots) or None,
                        error=(t.outcome.details.get("error") or (t.errors[0] if t.errors else None)),
                        log_dir=logs if logs.is_dir() else None, prompt=t.problem_statement, trajectory=t)


__all__ = ["Entry", "EvalRunSource", "Source", "TrajectoriesSource", "open_source", "readers"]

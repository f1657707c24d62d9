"""Graded experience as value-model examples: episodes, their text under a token budget, labels.

An `Episode` is one graded attempt at one task, read from a trajectories JSONL file (the
`Trajectory` records `orchard distill` / `orchard eval` write) or from an eval run folder
(`results.jsonl`, each attempt's `patch.diff` or the predictions files, the trajectory file an
attempt names, the task's problem statement from the run's suite, and for an attempt without a
patch its `evidence.json`).

Labels come from the grader only: resolved -> 1, every other graded outcome (unresolved, empty
patch, patch that did not apply, timeout) -> 0. env_error / infra_error say nothing about the
patch: they are excluded, never counted as negatives.

The model reads: problem statement, the end of the trajectory, the final patch, in that order
(the patch last, next to the token whose state is pooled). Under a token budget each section
gets a share: the patch first (its head: file headers and first hunks), then the trajectory's
END (what the agent did last), then the problem statement's head; a section that needs less
than its share leaves the rest to the others.

An episode whose evidence has no patch (claw: mail, calendar, todos, contacts, files) has an
"Actions" section in the patch's place (actions.py: its tool calls with their arguments and
status, the final answer, the state changes, the files), budgeted and pooled as the patch is.

Held-out sets are drawn BY TASK (suite, task id): no task is on both sides of a split.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchard_cli.errors import UsageError
from orchard_cli.value.actions import Actions, actions_of, render

ERROR_CATEGORIES = frozenset({"env_error", "infra_error"})
# Shares of the budget, in priority order; unused share flows to the next sections.
SHARES = (("patch", 0.55), ("trajectory", 0.25), ("problem", 0.20))
ORDER = ("header", "problem", "trajectory", "patch")
TITLES = {"problem": "### Problem\n", "trajectory": "### Trajectory (last steps)\n",
          "patch": "### Final patch\n", "actions": "### Actions\n"}
MAX_TOOL_OUTPUT = 2000  # characters of one tool result kept before budgeting (the end of it)


class Episode(BaseModel):
    """One graded attempt at one task: what the value model reads, and the grader's verdict."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    task_id: str
    harness: str = ""
    model: str = ""
    attempt: int = 1
    origin: str = ""
    """Where it was read: a run folder or a trajectories file."""
    problem: str = ""
    trajectory: str = ""
    """The conversation, rendered as text (empty for graded patches without an agent)."""
    patch: str = ""
    actions: Actions | None = None
    """What an episode without a patch did (actions.py); None for an episode read as a patch."""
    category: str
    resolved: bool = False

    @property
    def label(self) -> int | None:
        """1 resolved, 0 any other graded outcome, None for env/infra errors (not evidence)."""
        if self.category in ERROR_CATEGORIES:
            return None
        return int(self.resolved)

    @property
    def task_key(self) -> str:
        return f"{self.suite}::{self.task_id}"

    @property
    def applies(self) -> bool:
        """A non-empty patch that applied (the execution signal, known before any test runs); for
        an episode without a patch: it did something (a tool call or an answer)."""
        if self.actions is not None:
            return bool(self.actions.calls or self.actions.answer.strip())
        return bool(self.patch.strip()) and self.category not in ("patch_apply_failed", "empty_patch")

    @property
    def output(self) -> str:
        """What the episode produced, as text: its patch, or its rendered actions (what the
        majority and shortest baselines compare)."""
        return render(self.actions) if self.actions is not None else self.patch

    def digest(self) -> str:
        """Identity of what the model reads (for feature caches and de-duplication)."""
        parts = [self.suite, self.harness, self.problem, self.trajectory, self.patch]
        if self.actions is not None:
            parts.append(self.actions.model_dump_json())
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


# ---- rendering a trajectory ---------------------------------------------------------------------

def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def render_messages(messages: Sequence[dict[str, Any]], problem: str = "") -> str:
    """The conversation as compact text: no system prompt, no first user turn when it only
    restates the problem, tool calls as `name(arguments)`, long tool outputs cut to their end."""
    lines: list[str] = []
    first_user = True
    for message in messages:
        role = message.get("role", "")
        text = _content_text(message.get("content")).strip()
        if role == "system":
            continue
        if role == "user" and first_user:
            first_user = False
            if not problem or problem.strip()[:200] in text or len(text) > 4 * max(len(problem), 1):
                continue
        if role == "tool" and len(text) > MAX_TOOL_OUTPUT:
            text = "..." + text[-MAX_TOOL_OUTPUT:]
        if text:
            lines.append(f"[{role}] {text}")
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            lines.append(f"[call] {fn.get('name', '?')}({fn.get('arguments', '')})")
    return "\n".join(lines)


# ---- reading episodes ---------------------------------------------------------------------------

def episodes_from_trajectories(paths: Iterable[str | Path]) -> list[Episode]:
    """Episodes of trajectories JSONL files: the latest line of each episode (one that `--resume`
    ran again counts once)."""
    from orchard_cli.trajectory import read_trajectories

    out: list[Episode] = []
    for path in map(Path, paths):
        if not path.is_file():
            raise UsageError(f"trajectories file {path} does not exist")
        trajectories = read_trajectories(path)
        if not trajectories:
            raise UsageError(f"{path} holds no trajectory records")
        for traj in trajectories:
            out.append(Episode(
                suite=traj.suite, task_id=traj.task_id, harness=traj.harness, model=traj.model,
                attempt=traj.attempt, origin=str(path), problem=traj.problem_statement,
                trajectory=render_messages(traj.messages, traj.problem_statement), patch=traj.patch,
                actions=actions_of(traj.evidence) if not traj.patch.strip() else None,
                category=traj.outcome.category, resolved=traj.outcome.resolved))
    return out


class RunInfo(BaseModel):
    """What a run folder says about itself (config.json), enough to tell suites apart."""

    model_config = ConfigDict(extra="forbid")

    path: str
    suite: str
    """The suite's name as its tasks carry it (a file suite: the file's stem)."""
    suite_arg: str
    dataset: str | None = None
    dataset_sha256: str | None = None
    source: str = ""
    harness: str | None = None

    @property
    def identity(self) -> tuple[str, str | None]:
        return self.suite, self.dataset_sha256


def run_info(path: str | Path) -> RunInfo:
    from orchard_cli.runs import RunFolder

    path = Path(path)
    config = RunFolder(path).require(config=True).read_config()
    suite_arg = str(config.get("suite", ""))
    suite = suite_arg
    if suite_arg.endswith((".parquet", ".jsonl", ".json")):
        suite = Path(suite_arg).stem  # load_suite names a file suite by its stem
    return RunInfo(path=str(path), suite=suite, suite_arg=suite_arg, dataset=config.get("dataset"),
                   dataset_sha256=config.get("dataset_sha256"), source=str(config.get("source", "")),
                   harness=config.get("harness"))


def _problems(info: RunInfo, ids: list[str]) -> dict[str, str]:
    """The problem statements of a run's tasks: from its tasks.jsonl, or (runs from before it)
    the suite loaded again."""
    from orchard_cli.errors import OrchardError
    from orchard_cli.runs import RunFolder
    from orchard_cli.families import load_suite

    recorded = {t.task_id: t.problem_statement for t in RunFolder(info.path).read_tasks()}
    if recorded and all(i in recorded for i in ids):
        return {i: recorded[i] for i in ids}
    try:
        _, tasks = load_suite(info.suite_arg, dataset=info.dataset, instances=ids)
    except OrchardError as exc:
        raise UsageError(f"{info.path}: cannot read the problem statements of {info.suite_arg}: "
                         f"{exc.message}", hint=exc.hint) from None
    return {t.task_id: t.problem_statement for t in tasks}


def _conversations(run: Path, refs: set[str]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(task id, attempt) -> the conversation of that episode, from the run's trajectories file(s)."""
    from orchard_cli.trajectory import read_trajectories

    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for ref in sorted(refs):
        path = Path(ref) if Path(ref).is_absolute() else run / ref
        if path.is_file():
            out.update({(t.task_id, t.attempt): t.messages for t in read_trajectories(path)})
    return out


def _predicted_patches(run: Path) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for path in sorted(run.glob("predictions*.jsonl")):
        match = re.fullmatch(r"predictions(?:-attempt-(\d+))?\.jsonl", path.name)
        if not match:
            continue
        attempt = int(match.group(1) or 1)
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out[(row["instance_id"], attempt)] = row.get("model_patch") or ""
    return out


def _evidence(log_dir: Path) -> dict[str, Any] | None:
    """An attempt's stored evidence (logs/<task>/attempt-<k>/evidence.json) as JSON, if any."""
    from orchard_cli.evidence import EVIDENCE_FILE

    path = log_dir / EVIDENCE_FILE
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def episodes_from_run(path: str | Path) -> tuple[RunInfo, list[Episode]]:
    """The graded attempts of one eval run folder, with their problem statements and patches (or,
    for attempts without a patch, their actions from evidence.json)."""
    from orchard_cli.runs import RunFolder

    info = run_info(path)
    run = Path(path)
    results = RunFolder(run).latest_results()
    if not results:
        raise UsageError(f"{run} has no results yet (results.jsonl is empty)")
    problems = _problems(info, sorted({r.instance_id for r in results}))
    predicted = _predicted_patches(run)
    conversations = _conversations(run, {r.trajectory for r in results if r.trajectory})
    out = []
    for r in results:
        patch_file = run / r.log_dir / "patch.diff" if r.log_dir else None
        if patch_file is not None and patch_file.is_file():
            patch = patch_file.read_text(encoding="utf-8", errors="replace")
        else:
            patch = predicted.get((r.instance_id, r.attempt), "")
        actions = actions_of(_evidence(run / r.log_dir)) if r.log_dir and not patch.strip() else None
        problem = problems.get(r.instance_id, "")
        out.append(Episode(suite=info.suite, task_id=r.instance_id, harness=info.harness or info.source.split(":")[0],
                           model=r.model or "", attempt=r.attempt, origin=str(run), problem=problem,
                           trajectory=render_messages(conversations.get((r.instance_id, r.attempt), []), problem)
                           if r.trajectory else "", patch=patch, actions=actions,
                           category=r.category, resolved=r.resolved))
    return info, out


def episodes_from_runs(paths: Iterable[str | Path]) -> list[Episode]:
    return [ep for path in paths for ep in episodes_from_run(path)[1]]


# ---- text under a token budget ------------------------------------------------------------------

def sections(ep: Episode) -> dict[str, str]:
    """The parts of an episode's text, before budgeting. 'patch' is the last section: the patch,
    or the actions of an episode without one."""
    header = f"suite: {ep.suite}" + (f" · harness: {ep.harness}" if ep.harness else "") + "\n"
    final = render(ep.actions) if ep.actions is not None else ep.patch.strip() or "(no patch)"
    return {"header": header, "problem": ep.problem.strip(), "trajectory": ep.trajectory.strip(),
            "patch": final}


def title(ep: Episode, name: str) -> str:
    """The title line of a section ('patch': '### Actions' for an episode without a patch)."""
    return TITLES["actions"] if name == "patch" and ep.actions is not None else TITLES[name]


def allocate(lengths: dict[str, int], budget: int) -> dict[str, int]:
    """Tokens granted to each budgeted section: shares in priority order, leftovers passed on."""
    granted = {name: 0 for name, _ in SHARES}
    left = budget
    for name, share in SHARES:  # first pass: each up to its share
        granted[name] = min(lengths.get(name, 0), int(budget * share), left)
        left -= granted[name]
    for name, _ in SHARES:  # second pass: leftovers, in priority order
        extra = min(lengths.get(name, 0) - granted[name], left)
        granted[name] += extra
        left -= extra
    return granted


def compose(token_ids: dict[str, list[int]], budget: int) -> tuple[list[int], tuple[int, int]]:
    """One token sequence of at most `budget` tokens and the span (start, end) of the patch.

    `token_ids` holds each section's tokens, titles included ('header', 'problem', 'trajectory',
    'patch'); the header always fits. Cuts: the patch and the problem keep their head, the
    trajectory keeps its end."""
    header = token_ids.get("header", [])
    lengths = {name: len(token_ids.get(name, [])) for name, _ in SHARES}
    granted = allocate(lengths, max(0, budget - len(header)))
    ids: list[int] = list(header)
    span = (0, 0)
    for name in ORDER[1:]:
        part = token_ids.get(name, [])
        n = granted[name]
        kept = part[len(part) - n:] if name == "trajectory" else part[:n]
        if name == "patch":
            span = (len(ids), len(ids) + len(kept))
        ids.extend(kept)
    return ids, span


# ---- labels, balance, splits --------------------------------------------------------------------

def labelled(episodes: Iterable[Episode]) -> tuple[list[Episode], int]:
    """(episodes with a label, number excluded as env/infra errors)."""
    kept, dropped = [], 0
    for ep in episodes:
        if ep.label is None:
            dropped += 1
        else:
            kept.append(ep)
    return kept, dropped


def balance_weights(labels: Sequence[int], neg_ratio: float = 1.0) -> list[float]:
    """Per-example weights giving negatives `neg_ratio` times the positives' total weight
    (1.0: the classes weigh the same however many of each there are); mean weight 1."""
    n_pos = sum(1 for y in labels if y == 1)
    n_neg = len(labels) - n_pos
    if not n_pos or not n_neg:
        return [1.0] * len(labels)
    w_pos, w_neg = 1.0 / n_pos, neg_ratio / n_neg
    raw = [w_pos if y == 1 else w_neg for y in labels]
    scale = len(raw) / sum(raw)
    return [w * scale for w in raw]


def split_by_task(keys: Iterable[str], holdout: float, seed: int, fixed_train: Iterable[str] = (),
                  fold: tuple[int, int] | None = None) -> tuple[set[str], set[str]]:
    """(train task keys, held-out task keys): whole tasks, drawn with a seed. `fold` (k, n) holds
    out the k-th of n interleaved folds of the same seeded order instead of a fraction (the n
    folds cover every task once: cross-validation). `fixed_train` (tasks an earlier model learnt
    from) never goes to the held-out side."""
    fixed = set(fixed_train)
    pool = sorted(set(keys) - fixed)
    rng = random.Random(f"value-split:{seed}")
    rng.shuffle(pool)
    if fold is not None:
        k, n = fold
        held = set(pool[k - 1::n])
        return (set(pool) - held) | fixed, held
    n_out = round(len(pool) * holdout) if holdout > 0 else 0
    if holdout > 0 and len(pool) >= 2:
        n_out = min(max(n_out, 1), len(pool) - 1)
    held = set(pool[:n_out])
    return set(pool[n_out:]) | fixed, held

"""Task synthesis, a family capability: `orchard tasks synth --family F` and the recipe's synth
stage find F's synthesizer here by name and know nothing else of it.

`synthesizers` maps a family name to "module:attr" (nothing imported until one is named):
orchard's own (swe: bugs in real packages; claw and web: seeded templates), and third-party ones
from the entry-point group `orchard.synth`. A synthesizer writes either a folder of task folders
(`writes = "folder"`, `--out-dir`) or one data file (`"file"`, `--out`); one with templates lists
them (`--list`) and draws from the chosen ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Protocol

from orchard_cli.errors import UsageError
from orchard_cli.registry import Registry

BUILTIN = {
    "swe": "orchard_cli.tasks.synth.command:SWESynthesizer",
    "claw": "orchard_cli.tasks.claw.synth_suite:ClawSynthesizer",
    "web": "orchard_cli.tasks.web.synth:WebSynthesizer",
}
synthesizers: Registry = Registry("task synthesizer", "orchard.synth", BUILTIN)


@dataclass(frozen=True)
class SynthRequest:
    """What one synth run was asked: the common part, and the family's own options by name."""

    n: int
    seed: int
    backend: str = "local"
    workers: Optional[int] = None
    """Sandboxes at once (None: the synthesizer's default)."""
    out: Optional[Path] = None
    """The data file a `writes = "file"` synthesizer writes."""
    out_dir: Optional[Path] = None
    """The folder of task folders a `writes = "folder"` synthesizer writes."""
    templates: Optional[list[str]] = None
    """The chosen templates (None: all), already checked against `Synthesizer.templates()`."""
    options: dict[str, Any] = field(default_factory=dict)
    """The family's own options (swe: packages, from_repo, commit, python, writer_model, ...)."""


@dataclass
class SynthResult:
    report: dict[str, Any]
    """What `--format json` prints (each family's own keys)."""
    kept: int
    dropped: dict[str, str]
    """Task id (or package) -> why it was left out."""
    summary: list[Any]
    """What a terminal shows: lines or rich renderables."""
    failure: Optional[Exception] = None
    """Raised after the output when the run fell short (swe: a package refused), for its exit code."""


class Synthesizer(Protocol):
    family: str
    writes: Literal["folder", "file"]
    unit: str
    """What the progress line counts: "task" or "package"."""

    def templates(self) -> Optional[list[str]]:
        """The template names, or None for a synthesizer without templates."""

    def describe(self) -> list[dict[str, str]]:
        """A row per template: template, category, difficulty, prompt (and any other column)."""

    def check(self, request: SynthRequest) -> None:
        """Refuse a request it cannot run (UsageError), before anything is built or written."""

    def run(self, request: SynthRequest, say: Callable[[str], None],
            on_task: Optional[Callable[[Any], None]] = None) -> SynthResult:
        """Make the tasks, validate them, write the kept ones."""


class TemplateSynthesizer:
    """A synthesizer of seeded templates that writes a folder of task folders, each kept only when
    valid three ways (claw's and web's). A subclass names its family and gives `templates`,
    `describe`, `plan(n, seed, chosen)` (refusing what it cannot make), `make(out_dir, n, seed,
    chosen=, backend=, workers=, say=, on_task=) -> report` and `summary(report, request)`;
    `kept_key` is the report's count of kept tasks."""

    family: str = ""
    writes: Literal["folder", "file"] = "folder"
    unit = "task"
    kept_key = "kept"

    def templates(self) -> Optional[list[str]]:
        raise NotImplementedError

    def describe(self) -> list[dict[str, str]]:
        raise NotImplementedError

    def plan(self, n: int, seed: int, chosen: Optional[list[str]]) -> Any:
        raise NotImplementedError

    def make(self, out_dir: Path, n: int, seed: int, **how: Any) -> dict[str, Any]:
        raise NotImplementedError

    def summary(self, report: dict[str, Any], request: SynthRequest) -> str:
        raise NotImplementedError

    def check(self, request: SynthRequest) -> None:
        self.plan(request.n, request.seed, request.templates)

    def run(self, request: SynthRequest, say: Callable[[str], None],
            on_task: Optional[Callable[[Any], None]] = None) -> SynthResult:
        assert request.out_dir is not None
        report = self.make(request.out_dir, request.n, request.seed, chosen=request.templates,
                           backend=request.backend, workers=request.workers or 1, say=say, on_task=on_task)
        return SynthResult(report=report, kept=report[self.kept_key], dropped=report["dropped"],
                           summary=[self.summary(report, request)])


def load_synthesizer(family: str) -> Synthesizer:
    """The synthesizer of `family` (an unknown one lists those there are)."""
    return synthesizers.load(family)()


def choose_templates(synth: Synthesizer, chosen: list[str] | None, exclude: list[str] | None) -> list[str]:
    """The templates of `synth` to draw from: `chosen` (default all) minus `exclude`."""
    known = synth.templates()
    if known is None:
        with_templates = [n for n in synthesizers.names() if _has_templates(n)]
        raise UsageError(f"--family {synth.family} has no templates: --templates, --exclude-templates and "
                         f"--list go with {' or '.join(with_templates)}")
    return choose(chosen, exclude, known, synth.family)


def _has_templates(name: str) -> bool:
    try:
        return load_synthesizer(name).templates() is not None
    except Exception:  # a third-party synthesizer that cannot load has none to offer
        return False


def choose(chosen: list[str] | None, exclude: list[str] | None, known: list[str], family: str) -> list[str]:
    """`chosen` (default: every known template) minus `exclude`, in `known`'s order; an unknown
    name is a one-line UsageError listing the valid ones."""
    unknown = [n for n in [*(chosen or ()), *(exclude or ())] if n not in known]
    if unknown:
        raise UsageError(f"no {family} template named {', '.join(dict.fromkeys(unknown))}",
                         hint=f"templates: {', '.join(known)} (orchard tasks synth --family {family} --list)")
    wanted = set(chosen or known) - set(exclude or ())
    names = [n for n in known if n in wanted]
    if not names:
        raise UsageError("--templates / --exclude-templates leave no template to draw from")
    return names


def split_names(values: list[str] | None) -> list[str] | None:
    """Repeated or comma-separated option values -> names (None when none was given)."""
    if not values:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()] or None

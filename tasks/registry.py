"""The task registry: task families by name, and the named suites they serve.

`families` maps a family name to its class (entry-point group `orchard.tasks` for third-party
families); `SUITES` names the benchmark suites (`swe-verified`, `swe-lite`, ...) with their family,
default source and the data file looked for in ORCHARD_SWE_DATA. `load_suite` is what `eval`,
`distill` and `tasks` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.errors import UnknownNameError
from orchard_cli.registry import Registry
from orchard_cli.tasks.base import Task, TaskFamily

families: Registry = Registry("task family", "orchard.tasks",
                              {"swe": "orchard_cli.tasks.swe.family:SWEFamily"})


@dataclass(frozen=True)
class SuiteInfo:
    name: str
    family: str
    source: str
    """Default source: a hub dataset id (split `split`) or a file."""
    description: str
    data_file: str | None = None
    """File name looked for in the family's data folder (ORCHARD_SWE_DATA for SWE)."""
    split: str = "test"


SUITES: dict[str, SuiteInfo] = {s.name: s for s in (
    SuiteInfo("swe-verified", "swe", "princeton-nlp/SWE-bench_Verified",
              "SWE-bench Verified: 500 human-validated Python issues (test split)",
              data_file="swe-bench-verified.parquet"),
    SuiteInfo("swe-lite", "swe", "princeton-nlp/SWE-bench_Lite",
              "SWE-bench Lite: 300 self-contained Python issues (test split)",
              data_file="swe-bench-lite.parquet"),
    SuiteInfo("swe-mini", "swe", str(Path(__file__).with_name("data") / "swe-mini.jsonl"),
              "bugs injected into 5 small PyPI packages by `orchard tasks synth` (bundled; "
              "sources and environments fetched on first use)"),
)}

FILE_SUFFIXES = (".parquet", ".jsonl", ".json")


def list_suites() -> list[SuiteInfo]:
    return sorted(SUITES.values(), key=lambda s: s.name)


def load_family(name: str, **options: Any) -> TaskFamily:
    return families.load(name)(**options)


def load_suite(suite: str, *, dataset: str | None = None, instances: list[str] | None = None,
               repo: str | None = None, limit: int | None = None, slice_: str | None = None,
               repo_mirror: str | None = None) -> tuple[TaskFamily, list[Task]]:
    """The family and tasks of a suite name, or of a SWE-bench-format file (.parquet/.jsonl/.json).

    `dataset` replaces the suite's source (a file or a hub id). The family carries the data's
    sha256 as `family.dataset_sha256`.
    """
    filters = dict(instances=instances, repo=repo, limit=limit, slice_=slice_)
    info = SUITES.get(suite)
    if info is None:
        if suite.endswith(FILE_SUFFIXES) or Path(suite).is_file():
            family = load_family("swe", repo_mirror=repo_mirror)
            name = Path(suite).stem
            return family, family.load(dataset or suite, suite=name, **filters)
        valid = ", ".join(sorted(SUITES))
        raise UnknownNameError(f"unknown suite {suite!r}; valid: {valid} (or a .parquet/.jsonl/.json file)")
    family = load_family(info.family, repo_mirror=repo_mirror)
    source = dataset or info.source
    tasks = family.load(source, suite=info.name, split=info.split,
                        data_file=None if dataset else info.data_file, **filters)
    return family, tasks

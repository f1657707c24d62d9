"""`orchard tasks synth`: SWE tasks made from real packages by procedural bug injection.

For each NAME==VERSION: fetch the sdist (pip), make the deterministic repository, let the SWE
family build its environment and set a sandbox up, run the suite twice (reliable tests only),
then try seeded AST mutations of non-test code, keeping a mutant when 1..max_failing reliable
tests fail. Each kept mutant becomes a SWE-bench instance, validated before it is written: in
fresh sandboxes the gold patch resolves and the unpatched tree does not, by the family's grader.
Nothing is written unless every package went through.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchard_cli.errors import EXIT_BELOW_BAR, OrchardError, UsageError
from orchard_cli.home import state_dir
from orchard_cli.tasks.synth import instances, source, statement, tests_run
from orchard_cli.tasks.synth.ids import COLLECTIONS, IdCheck, test_file
from orchard_cli.tasks.synth.mutate import KINDS, Mutation, find_mutations, is_source_file
from orchard_cli.tasks.synth.search import Candidate, Evaluator
from orchard_cli.tasks.synth.validate import validate

SCHEMA_VERSION = 1
DEFAULT_MAX_FAILING = 10
CANDIDATES_PER_TASK = 25
BASELINE_TIMEOUT = 1200.0
MIN_TESTS = 10
"""The floor: a package is refused only when fewer of its tests than this pass reliably, with ids
the grader reads back (tests that fail before any mutation and unreadable ids are left out and
counted, as SWE-bench leaves them out of PASS_TO_PASS)."""

Say = Callable[[str], None]


class SynthError(OrchardError):
    """A package cannot be made into tasks (no tests, too few passing before mutation, ...)."""


class PackagesRefused(OrchardError):
    """Some packages gave no tasks (the others' were written): exit 1, as a run below its bar."""

    exit_code = EXIT_BELOW_BAR


def refusals(report: "SynthReport") -> PackagesRefused | None:
    """The error to end a synth run with when any package was refused, else None."""
    refused = [p for p in report.packages if p.refused]
    if not refused:
        return None
    kept = f"{report.tasks} tasks from the others written to {report.out}" if report.tasks else "no tasks written"
    return PackagesRefused(f"{len(refused)} of {len(report.packages)} packages refused ({kept}): "
                           + "; ".join(p.refused or "" for p in refused),
                           hint="each reason is in the report (--format json: packages[].refused)")


class SynthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    packages: list[str] = Field(default_factory=list)
    """NAME==VERSION of each package."""
    from_repo: str | None = None
    """A local git repository (checkout or bare mirror) to make tasks of, at `commit`."""
    commit: str | None = None
    """The commit of `from_repo`: its tree is the package, its date the era of the environment."""

    @model_validator(mode="after")
    def _sources(self) -> "SynthConfig":
        if not self.packages and not self.from_repo:
            raise ValueError("give --package NAME==VERSION or --from-repo PATH --commit SHA")
        if bool(self.from_repo) != bool(self.commit):
            raise ValueError("--from-repo and --commit go together")
        return self
    n: int = Field(10, ge=1)
    """Tasks wanted per package."""
    seed: int = 0
    max_failing: int = Field(DEFAULT_MAX_FAILING, ge=1)
    """A mutant is kept when between 1 and this many tests fail."""
    max_candidates: int | None = Field(None, ge=1)
    """Mutants tried per package at most; default 25 x n."""
    python: str = Field("3.11", pattern=r"^\d+\.\d+$")
    writer_model: str | None = None
    base_url: str | None = None
    backend: str = "local"
    jobs: int = Field(default_factory=lambda: min(2, os.cpu_count() or 1), ge=1)
    """Sandboxes running mutants at once (the tasks kept do not depend on it)."""


class KindStats(BaseModel):
    tried: int = 0
    kept: int = 0


class PackageReport(BaseModel):
    package: str
    version: str
    sha256: str = ""
    wanted: int = 0
    tests: int = 0
    """Tests that passed on both clean runs."""
    flaky: int = 0
    """Tests that passed on one clean run only."""
    unstable: int = 0
    """Passing tests left out: their file's test ids change from one process to the next
    (parameters numbered in the order of a set, say), so the grader would not find them."""
    unreadable: int = 0
    """Collected tests left out: the SWE-bench pytest parser cannot read their ids back."""
    failing: int = 0
    """Tests left out as they fail or error before any mutation (SWE-bench leaves such tests out
    of PASS_TO_PASS)."""
    refused: str | None = None
    """Why the package gave no tasks (the others' tasks are written all the same)."""
    candidates: int = 0
    """Mutants enumerated in the package's non-test code."""
    tried: int = 0
    kept: int = 0
    rejected: dict[str, int] = Field(default_factory=dict)
    """Why mutants were not kept: untested (no test file names its function or module; not
    run), survived (no test fails), too_many_failing, timeout, invalid (failed validation)."""
    kinds: dict[str, KindStats] = Field(default_factory=dict)
    writer_fallbacks: int = 0
    seconds: dict[str, float] = Field(default_factory=dict)
    """env (build + setup), baseline, search, validate, total."""


class SynthReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    out: str | None = None
    seed: int
    max_failing: int
    tasks: int = 0
    seconds: float = 0.0
    packages: list[PackageReport] = Field(default_factory=list)


def candidate_order(mutations: list[Mutation], seed: int, key: str) -> list[Mutation]:
    """Seeded and spread: each kind shuffled, then taken in turns, kind by kind."""
    rng = random.Random(f"{seed}:{key}")
    groups = {kind: sorted((m for m in mutations if m.kind == kind), key=lambda m: (m.path, m.start))
              for kind in KINDS}
    for kind in KINDS:
        rng.shuffle(groups[kind])
    order: list[Mutation] = []
    while any(groups.values()):
        for kind in KINDS:
            if groups[kind]:
                order.append(groups[kind].pop(0))
    return order


def _tracked(repo: Path) -> list[str]:
    return sorted(source.git(repo, "ls-files", "-z").split("\0")[:-1])


def _names(mutation: Mutation) -> list[str]:
    parts = [p for p in mutation.function.split(".") if p and not p.startswith("<")]
    stem = Path(mutation.path).stem
    module = Path(mutation.path).parent.name if stem == "__init__" else stem
    return list(dict.fromkeys([*reversed(parts), module]))


class _Package:
    def __init__(self, config: SynthConfig, spec: str | None, env: Any, family: Any, say: Say) -> None:
        """`spec`: NAME==VERSION of an sdist; None: config.from_repo at config.commit."""
        self.config, self.env, self.family, self.say = config, env, family, say
        if spec is None:
            self.name, self.version = Path(config.from_repo or "repo").name, (config.commit or "")[:12]
        else:
            self.name, self.version = source.parse_spec(spec)
        self.label = f"{self.name}=={self.version}" if spec else f"{config.from_repo}@{self.version}"
        self.report = PackageReport(package=self.name, version=self.version, wanted=config.n,
                                    kinds={k: KindStats() for k in KINDS})

    def reject(self, reason: str) -> None:
        self.report.rejected[reason] = self.report.rejected.get(reason, 0) + 1

    def prepare(self) -> None:
        """Fetch the sdist, make the clean repository, check that it ships tests (cheap: every
        package goes through this before any is searched)."""
        started = time.monotonic()
        self.work = Path(tempfile.mkdtemp(prefix="synth-", dir=state_dir("synth", "work")))
        self.scratch = self.work / "tree"
        if self.label.startswith(f"{self.name}=="):
            self.say(f"{self.label}: fetching the sdist")
            clean, digest, archive = source.clean_tree(self.name, self.version, None, self.scratch)
            self.report.sha256 = digest
            self.src: Any = source.SdistSource(package=self.name, version=self.version,
                                               filename=archive.name, sha256=digest, commit=clean)
        else:
            from orchard_cli.tasks.synth import gitsource

            self.say(f"{self.label}: reading its tree")
            self.src = gitsource.clean_tree(self.config.from_repo or "", self.config.commit or "", self.scratch)
            self.name, self.version = self.src.package, self.src.version
            self.report.package, self.report.version = self.name, self.version
        if not tests_run.ships_tests(self.scratch):
            raise SynthError(f"{self.label} ships no tests" + (" in its sdist" if self.report.sha256 else ""))
        self.environment = tests_run.recipe(self.scratch, self.config.python, self.name)
        self.report.seconds["fetch"] = round(time.monotonic() - started, 1)

    def close(self) -> None:
        if getattr(self, "work", None):
            shutil.rmtree(self.work, ignore_errors=True)

    def run(self) -> list[dict[str, Any]]:
        started = time.monotonic()
        try:
            return self._run()
        finally:
            self.report.seconds["total"] = round(time.monotonic() - started
                                                 + self.report.seconds.get("fetch", 0), 1)

    def _run(self) -> list[dict[str, Any]]:
        scratch, src, environment = self.scratch, self.src, self.environment
        created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if getattr(src, "committed_at", None):  # a repository's commit: its own day is the era
            from orchard_cli.tasks.swe.environment import utc

            created_at = utc(src.committed_at)
        clean_task = self.family.task(
            instances.clean_record(self.name, self.version, src, environment, created_at), "synth")
        self.say(f"{self.label}: building its environment, collecting its tests and running them twice")
        mark = time.monotonic()
        try:
            bench = tests_run.Workbench(self.family, clean_task, self.env, self.config.backend)
            benches = [bench.__enter__()]
        except OrchardError as exc:
            error = SynthError(f"{self.label}: its environment could not be set up: {exc.message}",
                               hint=exc.hint)
            error.exit_code = exc.exit_code  # an infrastructure failure stays one (exit 3)
            raise error from exc
        try:
            self.report.seconds["env"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            ids = self._check_ids(bench)
            base, runs = bench.baseline(BASELINE_TIMEOUT, ids)
            self.report.seconds["baseline"] = round(time.monotonic() - mark, 1)
            self._check_baseline(base, runs)
            for _ in range(self.config.jobs - 1):
                benches.append(tests_run.Workbench(self.family, clean_task, self.env,
                                                   self.config.backend).__enter__())
            return self._search(benches, base, scratch, src, environment, created_at)
        finally:
            for each in benches:
                each.__exit__(None, None, None)

    def _check_ids(self, bench: tests_run.Workbench) -> IdCheck:
        """Collect the suite in fresh processes; ids the grader cannot read back are left out
        (counted), whatever their share: the floor of passing tests decides (_check_baseline)."""
        found = bench.check_ids(COLLECTIONS, BASELINE_TIMEOUT)
        if found.collected is None:
            self.say(f"{self.label}: pytest gave no list of its test ids; judging them by two runs")
            return found
        self.report.unreadable = bad = found.unreadable_in_first()
        if bad:
            example = sorted(found.unreadable & set(found.collected))[0]
            self.say(f"{self.label}: {bad} of {len(found.collected)} test ids cannot be read back from a "
                     f"pytest log by the SWE-bench parser (e.g. {example!r}); they are left out")
        return found

    def _check_baseline(self, base: tests_run.Baseline, runs: list[tests_run.Run]) -> None:
        if any(r.timed_out for r in runs):
            raise SynthError(f"{self.label}: its test suite ran past {BASELINE_TIMEOUT:g} s")
        if not base.reliable and not base.broken:
            last = next((l for l in reversed(runs[0].log.splitlines()) if l.strip()), "no output")
            raise SynthError(f"{self.label}: its test suite ran no test ({last.strip()[:200]})")
        self.report.failing = len(base.broken)
        if base.broken:
            example = sorted(base.broken)[0]
            self.say(f"{self.label}: {len(base.broken)} of {base.tests} tests fail before any mutation "
                     f"(e.g. {example}); they are left out")
        if len(base.reliable) < MIN_TESTS:
            left = [f"{n} {what}" for n, what in ((len(base.broken), "failing before any mutation"),
                                                   (self.report.unreadable, "with ids the grader cannot read back"),
                                                   (len(base.unstable), "with ids that move from run to run"),
                                                   (len(base.flaky), "flaky")) if n]
            raise SynthError(f"{self.label}: {len(base.reliable)} tests left to make tasks of, fewer than "
                             f"the floor of {MIN_TESTS} (tests passing reliably, with ids the grader reads back)"
                             + (f"; left out: {', '.join(left)}" if left else ""),
                             hint="pick another release, or one whose tests pass on Python "
                                  f"{self.config.python}")
        report = self.report
        report.tests, report.flaky, report.unstable = len(base.reliable), len(base.flaky), len(base.unstable)
        moving = sorted({test_file(t) for t in base.unstable})
        unstable = (f"{len(base.unstable)} left out as their ids move from run to run "
                    f"({', '.join(moving[:3])}{' ...' if len(moving) > 3 else ''}), ") if moving else ""
        self.say(f"{self.label}: {len(base.reliable)} reliable tests, {len(base.flaky)} flaky, "
                 f"{unstable}{base.seconds:.1f} s per run")

    def _search(self, benches: list[tests_run.Workbench], base: tests_run.Baseline, scratch: Path,
                src: Any, environment: dict[str, Any],
                created_at: str) -> list[dict[str, Any]]:
        config, report = self.config, self.report
        texts = {p: (scratch / p).read_text(errors="replace") for p in _tracked(scratch)
                 if p.endswith(".py")}
        mutations = [m for p in sorted(texts) if is_source_file(p) for m in find_mutations(p, texts[p])]
        report.candidates = len(mutations)
        order = candidate_order(mutations, config.seed, f"{source.canonical(self.name)}=={self.version}")
        candidates = self._candidates(order, base, texts)
        budget = config.max_candidates or CANDIDATES_PER_TASK * config.n
        used: set[tuple[str, str]] = set()
        kept: list[dict[str, Any]] = []
        evaluator = Evaluator(benches, base, config.max_failing, max(30.0, 10 * base.seconds))
        skip = lambda c: c.files == [] or (c.mutation.path, c.mutation.function) in used  # noqa: E731
        mark = time.monotonic()
        validate_s = 0.0
        outcomes = evaluator.outcomes(candidates, skip)
        for candidate, outcome in outcomes:
            if len(kept) >= config.n or report.tried >= budget:
                break
            mutation = candidate.mutation
            if outcome is None:
                if candidate.files == []:
                    self.reject("untested")
                continue
            report.tried += 1
            report.kinds[mutation.kind].tried += 1
            if isinstance(outcome, str):
                self.reject(outcome)
                continue
            started = time.monotonic()
            record = self._record(scratch, mutation, candidate.original, outcome.failing, base,
                                  outcome.run, src, environment, created_at)
            problem = validate(self.family, self.env, record, config.backend)
            validate_s += time.monotonic() - started
            if problem:
                self.reject("invalid")
                self.say(f"{self.label}: {mutation.describe()} failed validation: {problem}")
                continue
            used.add((mutation.path, mutation.function))
            report.kinds[mutation.kind].kept += 1
            kept.append(record)
            self.say(f"{self.label}: kept {len(kept)}/{config.n}: {mutation.kind} in "
                     f"{mutation.function} ({len(outcome.failing)} failing)")
        outcomes.close()
        report.kept = len(kept)
        report.seconds.update(search=round(time.monotonic() - mark - validate_s, 1),
                              validate=round(validate_s, 1))
        return kept

    def _candidates(self, order: list[Mutation], base: tests_run.Baseline,
                    texts: dict[str, str]) -> list[Candidate]:
        """Each mutant with the test files to run first: [] when no test file names its function
        or module (not run), None when those files hold most of the suite (run it whole)."""
        relevant: dict[tuple[str, ...], list[str]] = {}
        out = []
        for mutation in order:
            names = tuple(_names(mutation))
            if names not in relevant:
                relevant[names] = tests_run.relevant_files(base.files, texts, list(names))
            files: list[str] | None = relevant[names]
            if files and 2 * sum(len(base.files[f]) for f in files) >= len(base.reliable):
                files = None
            out.append(Candidate(mutation, texts[mutation.path], files))
        return out

    def _record(self, scratch: Path, mutation: Mutation, original: str, failing: set[str],
                base: tests_run.Baseline, run: tests_run.Run, src: Any,
                environment: dict[str, Any], created_at: str) -> dict[str, Any]:
        base_commit, patch = instances.mutant_commit(scratch, self.name, self.version, mutation, original)
        ordered = sorted(failing)
        failed = statement.failures(run.log, ordered)
        key = instances.instance_id(self.name, self.version, mutation)
        text = statement.template(self.name, self.version, failed, key)
        if self.config.writer_model:
            try:
                text = statement.write_with_model(self.name, self.version, failed,
                                                  model=self.config.writer_model,
                                                  base_url=self.config.base_url or "")
            except Exception as exc:  # the template stands; the report counts the fallback
                self.report.writer_fallbacks += 1
                self.say(f"{self.label}: the writer model failed ({type(exc).__name__}: "
                         f"{str(exc)[:120]}); using the template")
        return instances.task_record(
            package=self.name, version=self.version, mutation=mutation, base_commit=base_commit,
            patch=patch, statement=text, fail_to_pass=ordered,
            pass_to_pass=sorted(base.reliable - failing), environment=environment, source=src,
            created_at=created_at, seed=self.config.seed)


def synthesize(config: SynthConfig, say: Say = lambda _: None) -> tuple[list[dict[str, Any]], SynthReport]:
    """Tasks for every package of `config`, validated. A package that cannot give tasks (no
    tests, too few passing, an environment that will not build...) is refused, with the reason
    in its report (`refused`), and the others go on: their tasks are returned all the same."""
    from orchard_cli.env import connect
    from orchard_cli.tasks.registry import load_family

    if config.writer_model and not config.base_url:
        raise UsageError("--writer-model needs --base-url (an OpenAI-compatible endpoint)")
    started = time.monotonic()
    report = SynthReport(seed=config.seed, max_failing=config.max_failing)
    family = load_family("swe")
    packages = [_Package(config, spec, None, family, say) for spec in config.packages]
    if config.from_repo:
        from orchard_cli.tasks.synth.gitsource import resolve

        resolve(config.from_repo, config.commit or "")  # a folder or commit that is not there: bad input (exit 2)
        packages.append(_Package(config, None, None, family, say))
    report.packages = [p.report for p in packages]
    tasks: list[dict[str, Any]] = []
    env = None
    try:
        ready = [p for p in packages if _refusing(p, p.prepare)]
        if ready:
            env = connect(config.backend)
        for package in ready:
            package.env = env
            kept: list[dict[str, Any]] = []
            if _refusing(package, lambda: kept.extend(package.run())):
                tasks += kept
    finally:
        for package in packages:
            package.close()
        if env is not None:
            env.close()
    report.tasks = len(tasks)
    report.seconds = round(time.monotonic() - started, 1)
    return tasks, report


def _refusing(package: "_Package", step: Callable[[], Any]) -> bool:
    """Run one step of a package; a failure of the package (an OrchardError) refuses it, with
    the reason in its report, and returns False. Ctrl-C and bugs go on up."""
    try:
        step()
        return True
    except OrchardError as exc:
        package.report.refused = " ".join(str(exc.message).split())
        package.say(f"refused: {package.report.refused}")
        return False


def write_suite(tasks: list[dict[str, Any]], out: Path) -> None:
    """One instance per line, written whole or not at all."""
    from orchard_cli.records import write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "".join(json.dumps(task, sort_keys=False) + "\n" for task in tasks))

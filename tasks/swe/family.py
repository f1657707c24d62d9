"""SWEFamily: SWE-bench instances as orchard tasks, graded on the patch in a fresh sandbox as
SWE-bench grades.

    SWEFamily      the catalogue (suites, `load`, groups, describe, env_key) and the task-level
                   steps its episodes take: `task_spec` (the sandbox), `prepare` (the environment
                   built or reused, the repository at its base commit), `run_tests` (the verdict
                   on a patch), with the recipe and repository caches; the synthesizer and the
                   benches call these directly
    SWEEpisode     one attempt (tasks/patch.py's `PatchEpisode`: the baseline after setup, the
                   diff as evidence, empty_patch without a sandbox): its network from the run's
                   options, and whether its sandbox runs the official image
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

from pathlib import Path

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.evidence import Evidence
from orchard_cli.family import RunOptions, Source, Suite
from orchard_cli.outcome import CategoryInfo
from orchard_cli.tasks.base import Outcome, SuiteInfo, Task
from orchard_cli.tasks.patch import PatchCatalogue, PatchEpisode
from orchard_cli.tasks.swe import dataset as ds
from orchard_cli.tasks.swe import envcheck, patchdeps
from orchard_cli.tasks.swe import environment as envs
from orchard_cli.tasks.swe.environment import EnvironmentUnavailable
from orchard_cli.tasks.swe.grading import DEFAULT_TEST_TIMEOUT, failing_tests, run_and_grade
from orchard_cli.tasks.swe.instance import TESTBED, EnvironmentRecipe, eval_script, recipe_for

SETUP_TIMEOUT = 900.0
DATA = Path(__file__).resolve().parent.parent / "data"


class SWEEpisode(PatchEpisode):
    """One attempt at an instance: the family's sandbox, environment and tests for its task."""

    def __init__(self, family: "SWEFamily", task: Task, options: RunOptions) -> None:
        super().__init__(task, options)
        self.family = family
        self.official: bool | None = None
        """Whether its sandbox runs the instance's official image (known once `spec` chose)."""

    def spec(self, backend: str) -> SandboxSpec:
        spec = self.family.task_spec(self.task, backend, network=self.options.network)
        self.official = backend != "local" and bool(spec.image) and spec.image == self.task.record.get("image")
        return spec

    def prepare(self, sandbox: SandboxHandle) -> None:
        self.family.prepare(self.task, sandbox)

    def run_tests(self, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        return self.family.run_tests(self.task, evidence, sandbox)

    def gold_patch(self) -> str:
        return self.family.gold_patch(self.task)

    def eval_script(self) -> str | None:
        return self.family.eval_script(self.task, self.options.backend, official=self.official)


class SWEFamily(PatchCatalogue):
    """Tasks from SWE-bench-format data; environments built per repo/version and cached."""

    name = "swe"
    categories = {**PatchCatalogue.categories,
                  "missing_dependency": CategoryInfo(label="a dependency the package index lacks",
                                                     color="#9b7fd0")}
    requirement_labels = {"needs_network": CategoryInfo(label="tests need the internet", color="#5b8bd0")}
    """Its own label for the core's needs_network: an instance whose tests reach the internet."""
    suites = (
        SuiteInfo("swe-verified", "swe", "princeton-nlp/SWE-bench_Verified",
                  "SWE-bench Verified: 500 human-validated Python issues (test split)",
                  data_file="swe-bench-verified.parquet"),
        SuiteInfo("swe-lite", "swe", "princeton-nlp/SWE-bench_Lite",
                  "SWE-bench Lite: 300 self-contained Python issues (test split)",
                  data_file="swe-bench-lite.parquet"),
        SuiteInfo("swe-mini", "swe", str(DATA / "swe-mini.jsonl"),
                  "bugs injected into 5 small PyPI packages by `orchard tasks synth` (bundled; "
                  "sources and environments fetched on first use)"),
    )

    def __init__(self, *, repo_mirror: str | None = None,
                 test_timeout: float = DEFAULT_TEST_TIMEOUT) -> None:
        self.repo_mirror = repo_mirror or os.environ.get("ORCHARD_SWE_REPOS")
        self.test_timeout = test_timeout
        self.network = "none"
        """The --network of code that calls `task_spec` itself (an episode passes its run's):
        'full' gives the instances' sandboxes (grading too) the network, as the official
        harness's containers have it; else none reaches anything (drop)."""
        self.dataset_sha256: str | None = None
        self.dataset_source: str | None = None
        self._recipes: dict[str, EnvironmentRecipe] = {}
        self._keys: dict[str, str] = {}  # task id -> its environment key (env_key)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        """Set by interrupt(): image builds started by this family give up."""

    # ---- loading ---------------------------------------------------------------------------

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """Every instance of the suite's file or hub dataset (or `source.dataset`); the core selects."""
        if source.repo_mirror:
            self.repo_mirror = source.repo_mirror
        data = ds.read_source(source.dataset or info.source, split=info.split,
                              data_file=None if source.dataset else info.data_file)
        self.dataset_sha256, self.dataset_source = data.sha256, data.source
        return Suite(info=info, tasks=[self.task(record, info.name) for record in data.records],
                     provenance={"dataset_sha256": data.sha256})

    def episode(self, task: Task, options: RunOptions) -> SWEEpisode:
        if options.repo_mirror and not self.repo_mirror:
            self.repo_mirror = options.repo_mirror
        return SWEEpisode(self, task, options)

    def close(self, *, interrupted: bool = False) -> None:
        if interrupted:
            self.interrupt()

    def task(self, record: dict[str, Any], suite: str) -> Task:
        return Task(task_id=record["instance_id"], suite=suite, family=self.name,
                    problem_statement=record.get("problem_statement") or "",
                    repo=record["repo"], record=record)

    def recipe(self, task: Task) -> EnvironmentRecipe:
        with self._lock:
            if task.task_id not in self._recipes:
                self._recipes[task.task_id] = recipe_for(task.record)
            return self._recipes[task.task_id]

    def gold_patch(self, task: Task) -> str:
        return task.record.get("patch") or ""

    def describe(self, task: Task) -> dict[str, Any]:
        record = task.record
        return {
            "instance_id": task.task_id, "suite": task.suite, "family": task.family, "repo": task.repo,
            "base_commit": record.get("base_commit"), "version": record.get("version"),
            "created_at": record.get("created_at"),
            "FAIL_TO_PASS": record.get("FAIL_TO_PASS", []), "PASS_TO_PASS": record.get("PASS_TO_PASS", []),
            "has_gold_patch": bool(record.get("patch")), "environment": record.get("environment"),
            "problem_statement": task.problem_statement,
        }

    def env_key(self, task: Task) -> str:
        """The environment's cache key: the recipe's, and for an instance declaring other
        dependencies than its environment's setup commit, their hash (`envs.build_commit`)."""
        recipe = self.recipe(task)
        key = recipe.key(task.record["repo"], task.record.get("version", ""))
        if (task.record.get("environment_setup_commit") or task.record["base_commit"]) == task.record["base_commit"]:
            return key
        with self._lock:
            known = self._keys.get(task.task_id)
        if known is None:
            try:
                repository = self.repository(task)
            except Exception:  # no repository here (offline, no mirror): the setup says why, later
                return key
            known = key + envs.build_commit(task.record, recipe, repository)[1]
            with self._lock:
                self._keys[task.task_id] = known
        return known

    # ---- sandboxes -------------------------------------------------------------------------

    def repository(self, task: Task):
        """The local git repository holding the task's base commit. A synthesized instance (one
        with a `source` field) is rebuilt from its recorded source, an sdist or a repository's commit (`orchard tasks synth`)."""
        if task.record.get("source"):
            from orchard_cli.tasks.synth.origins import rebuild_repository

            return rebuild_repository(task.record)
        return envs.repository(task.record["repo"], self.repo_mirror)

    def sandbox_network(self, backend: str, network: str | None = None) -> str:
        """'full' under --network full; else 'drop' where the backend has it (envs.grading_network)."""
        return "full" if (network or self.network) == "full" else envs.grading_network(backend)

    def task_spec(self, task: Task, backend: str, *, network: str | None = None) -> SandboxSpec:
        """The sandbox of `task` on `backend` (`network`: the run's --network, else `self.network`)."""
        labels = {"orchard.task": task.task_id[:63], "orchard.family": self.name}
        network = self.sandbox_network(backend, network)
        if backend == "local":
            repo_path = self.repository(task)
            return envs.local_spec(self.env_key(task), repo_path, labels=labels, network=network,
                                   python=envs.interpreter(self.recipe(task).python))
        if backend in ("docker", "kubernetes"):
            image = task.record.get("image")
            if backend == "docker" and image and docker_has_image(image):
                return SandboxSpec(image=image, workdir=TESTBED, network=network, memory="8Gi",
                                   cpu=2.0, pids=4096, timeout=4 * 3600, labels=labels)
            if backend == "docker":  # built locally, from the recipe the local backend uses
                from orchard_cli.tasks.swe import docker_env

                return docker_env.sandbox_spec(self.env_key(task), self.recipe(task), task.record,
                                               self.repository(task), labels, self._stop, network=network)
            raise EnvironmentUnavailable(
                f"{task.task_id}: the {backend} backend needs the image "
                f"{image or '(none named)'}, which it cannot pull; orchard builds SWE environments "
                "from orchard/base:bookworm on the docker backend only",
                hint="grade on the docker or local backend (--backend docker|local)")
        raise EnvironmentUnavailable(f"the SWE family has no environment recipe for backend {backend!r}")

    def prepare(self, task: Task, sandbox: SandboxHandle) -> None:
        """Build (or reuse) the environment, then put the repository at its base commit."""
        if official_image(sandbox):
            return  # an official image already holds /testbed at its base commit
        recipe = self.recipe(task)
        if sandbox.info.backend == "local":
            envs.ensure_local(sandbox.env, self.env_key(task), recipe, task.record,
                              self.repository(task))
        script = envs.instance_setup_script(recipe, task.record["base_commit"])
        sandbox.write_file("/tmp/orchard-setup.sh", script)
        job = sandbox.exec("bash /tmp/orchard-setup.sh > /tmp/orchard-setup.log 2>&1",
                           timeout=SETUP_TIMEOUT)
        head = sandbox.exec(["git", "-C", TESTBED, "rev-parse", "HEAD~1"], timeout=60)
        if job.timed_out or job.did_not_run or not head.ok or head.stdout.strip() != task.record["base_commit"]:
            log = sandbox.read_file("/tmp/orchard-setup.log").decode(errors="replace")
            last = next((l for l in reversed(log.splitlines()) if l.strip() and not l.startswith("+")),
                        job.error or job.status)
            raise EnvironmentUnavailable(
                f"{task.task_id}: could not check out {task.record['base_commit'][:12]} "
                f"of {task.record['repo']}: {last.strip()[:300]}")
        command = recipe.test_cmd or envcheck.script_test_command(task.record.get("eval_script"))
        problem = command and envcheck.check_runner(sandbox, command, self.checks_dir(task))
        if problem:
            raise EnvironmentUnavailable(f"{task.task_id}: {problem}")

    def checks_dir(self, task: Task) -> Path:
        """Where the environment checks of the task's environment are kept (envcheck.py)."""
        from orchard_cli.home import state_dir

        return state_dir("swe", "checks", self.env_key(task))

    def run_tests(self, task: Task, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        """Check the environment for this instance (once; envcheck.py), install what a patch
        changing the project's dependencies declares (patchdeps.py), apply the patch, run the
        tests, grade; an unresolved verdict where the environment cannot run the tests is
        env_error."""
        recipe = self.recipe(task)
        script = eval_script(task.record, recipe, keep_install=official_image(sandbox))
        check = None
        if (evidence.patch or "").strip():
            check = envcheck.check_instance(sandbox, task.record, eval_script(task.record, recipe),
                                            self.checks_dir(task))
        declared = None
        if check is not None and not official_image(sandbox) and patchdeps.touched(evidence.patch or "", recipe):
            declared = patchdeps.install(self, task, sandbox, evidence.patch or "")
            script = patchdeps.with_user_site(script)
        outcome = run_and_grade(task.record, sandbox, evidence.patch or "", script, timeout=self.test_timeout,
                                parser_name=task.record.get("log_parser") or recipe.log_parser)
        if declared and not outcome.resolved:
            outcome = outcome.model_copy(update={"error": f"{outcome.error}; {declared}" if outcome.error else declared})
        if outcome.category == "unresolved" and sandbox.info.backend == "local":
            outcome = without_system_packages(outcome, recipe)
        marker = self.environment_info(task) if not official_image(sandbox) else None
        return envcheck.judge(outcome, check, ((marker or {}).get("era") or {}).get("left_out"))

    def eval_script(self, task: Task, backend: str | None = None, *, official: bool | None = None) -> str | None:
        """The script `run_tests` runs (or would run on `backend`): the instance's own, whole, on
        its official image (`official`, when an episode knows it); without its install lines where
        orchard built the environment (the build ran them)."""
        if official is None:
            official = backend in ("docker", "kubernetes") and bool(task.record.get("image"))
        return eval_script(task.record, self.recipe(task), keep_install=official)

    def interrupt(self) -> None:
        """The run is stopping: docker image builds in progress (and their local environment
        builds) stop at once; a local backend's build sandbox is destroyed with its env."""
        import sys

        module = sys.modules.get("orchard_cli.tasks.swe.docker_env")  # only if a build could have started
        if module is not None:
            module.stop_builds(self._stop)

    def environment_info(self, task: Task) -> dict[str, Any] | None:
        """The built environment's marker (recipe, era date, build time), if built."""
        key = self.env_key(task)
        return envs.read_marker(key) if envs.is_built(key) else None


def without_system_packages(outcome: Outcome, recipe: EnvironmentRecipe) -> Outcome:
    """An unresolved outcome on the local backend, whose sandboxes use the host's system: when
    the spec installs packages the host lacks, and every failing test was skipped or never ran
    and the log names one of them (sphinx-10614: 'graphviz "dot" is not available'), the
    environment is at fault (env_error); otherwise the verdict stands, with a note."""
    missing = envs.missing_on_host(envs.system_packages(recipe))
    if not missing:
        return outcome
    names = " ".join(missing)
    failing = failing_tests(outcome.tests)
    log = (outcome.log or "").lower()
    if failing and set(failing) <= set(outcome.tests.get("unrun") or []) and any(p.lower() in log for p in missing):
        return outcome.model_copy(update={"category": "env_error", "error": (
            f"its failing tests did not run for want of the system packages its spec installs: {names} "
            f"(the local backend uses the host's: apt-get install {names}; or grade on --backend "
            f"docker, whose image installs them)")})
    note = f"this host lacks system packages the spec installs: {names}"
    return outcome.model_copy(update={"error": f"{outcome.error}; {note}" if outcome.error else note})


def official_image(sandbox: SandboxHandle) -> bool:
    """Whether the sandbox runs an official SWE-bench image (not one orchard built)."""
    from orchard_cli.tasks.swe.docker_env import built_here

    return sandbox.info.backend != "local" and not built_here(sandbox.info.spec)


def docker_has_image(image: str) -> bool:
    try:
        result = subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0



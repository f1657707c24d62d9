"""The SWE-bench instance a kept mutant becomes, and its gold patch.

The repository of a task is one parentless commit of the mutated tree (see source.py); the gold
patch is `git diff` from it back to the released tree, with every option that could differ between
machines pinned (prefixes, algorithm, context, full index lines, no renames, no colour).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.tasks.synth.mutate import Mutation
from orchard_cli.tasks.synth.source import SdistSource, canonical, commit_message, commit_tree, git

DIFF_FLAGS = ("diff", "--no-color", "--no-ext-diff", "--full-index", "--no-renames",
              "--diff-algorithm=myers", "--src-prefix=a/", "--dst-prefix=b/", "-U3")


def repo_name(package: str, source: Any = None) -> str:
    """pypi/NAME for a package's sdist, local/NAME for a repository (--from-repo)."""
    return f"{'local' if getattr(source, 'type', '') == 'git-repo' else 'pypi'}/{canonical(package)}"


def instance_id(package: str, version: str, mutation: Mutation) -> str:
    return f"{canonical(package)}__{version}-{mutation.id}"


def mutant_commit(scratch: Path, package: str, version: str, mutation: Mutation,
                  original: str) -> tuple[str, str]:
    """(base_commit, gold patch): commit the mutated tree in `scratch` (a copy of the clean tree),
    diff back to the original text, and leave `scratch` holding the clean tree again."""
    target = scratch / mutation.path
    target.write_text(mutation.apply(original))
    try:
        base = commit_tree(scratch, commit_message(package, version))
        target.write_text(original)
        patch = git(scratch, *DIFF_FLAGS)
    finally:
        target.write_text(original)
    return base, patch


def clean_record(package: str, version: str, source: SdistSource | Any, environment: dict[str, Any],
                 created_at: str) -> dict[str, Any]:
    """The instance of the unmutated tree: what the search sandbox is set up from."""
    return {"instance_id": f"{canonical(package)}__{version}-clean", "repo": repo_name(package, source),
            "base_commit": source.commit, "environment_setup_commit": source.commit, "patch": "",
            "test_patch": "", "problem_statement": "", "hints_text": "", "created_at": created_at,
            "version": version, "FAIL_TO_PASS": [], "PASS_TO_PASS": [],
            "environment": environment, "source": source.model_dump()}


def task_record(*, package: str, version: str, mutation: Mutation, base_commit: str, patch: str,
                statement: str, fail_to_pass: list[str], pass_to_pass: list[str],
                environment: dict[str, Any], source: SdistSource | Any, created_at: str,
                seed: int) -> dict[str, Any]:
    """A SWE-bench instance (plus `environment` and `source`, which orchard reads)."""
    return {
        "instance_id": instance_id(package, version, mutation),
        "repo": repo_name(package, source),
        "base_commit": base_commit,
        "patch": patch,
        "test_patch": "",
        "problem_statement": statement,
        "hints_text": "",
        "created_at": created_at,
        "version": version,
        "FAIL_TO_PASS": sorted(fail_to_pass),
        "PASS_TO_PASS": sorted(pass_to_pass),
        "environment_setup_commit": base_commit,
        "environment": environment,
        "source": source.model_dump(),
        "synth": {"kind": mutation.kind, "path": mutation.path, "function": mutation.function,
                  "seed": seed},
    }

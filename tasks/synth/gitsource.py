"""Synthesis from a repository: `orchard tasks synth --from-repo PATH --commit SHA`.

The tree of SHA in a local git repository (a checkout or a bare mirror) is what an sdist is for a
package: `git archive` writes it out (tracked files only: nothing the checkout's work tree holds
besides, no `.git`), unpacked by the guarded task-data loader (tasks/kit: no absolute paths, no
`..`, no links out of the tree, no devices, sizes capped, every entry checked before any is
written), then committed deterministically like an sdist's tree (source.commit_tree). The era of
its environment is the commit's own date.

A task's `source` says where its tree came from (`GitSource`): `rebuild` makes its repository
again from the record (archive, check the clean commit id, reverse the gold patch, check
`base_commit`), on any machine that has the repository at PATH.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchard_cli.errors import InfraError, UsageError
from orchard_cli.tasks.synth import source

GIT_TYPE = "git-repo"
ARCHIVE_TIMEOUT = 600


class GitSource(BaseModel):
    """The `source` field of an instance synthesized from a repository."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["git-repo"] = GIT_TYPE
    path: str
    """The repository's absolute path (a checkout or a bare mirror)."""
    revision: str
    """The full commit id given to --commit."""
    package: str
    """The project's name (pyproject.toml's, else the repository folder's)."""
    version: str
    """The revision's first 12 hex digits: what instance ids and statements call its version."""
    commit: str
    """The commit id of the unmutated tree, made deterministically (source.commit_tree)."""
    committed_at: str
    """The revision's committer date (RFC 3339): the era of the tasks' environment."""


def _git(path: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, timeout=ARCHIVE_TIMEOUT,
                              env=source.git_env(), text=True)
    except FileNotFoundError as exc:
        raise InfraError("git is not installed", hint="apt-get install git") from exc
    if done.returncode != 0:
        raise UsageError(f"git {args[0]} in {path}: {done.stderr.strip()[:300] or done.returncode}")
    return done.stdout


def resolve(path: str, commit: str) -> tuple[Path, str, str]:
    """(repository path, full commit id, committer date) of --from-repo PATH --commit SHA."""
    repo = Path(path).expanduser().resolve()
    if not repo.is_dir():
        raise UsageError(f"--from-repo {path}: no such folder")
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}|[\w./-]+", commit or ""):
        raise UsageError(f"--commit {commit!r} is not a commit id")
    try:
        full = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}").strip()
    except UsageError:
        raise UsageError(f"--from-repo {path} has no commit {commit!r}",
                         hint="give a commit of that repository (git log shows them)") from None
    date = _git(repo, "log", "-1", "--format=%cI", full, "--").strip()
    return repo, full, date


def export(repo: Path, revision: str, dest: Path) -> None:
    """The tree of `revision` (tracked files only) into `dest`, through the guarded loader
    (tasks/kit: every entry checked before any is written)."""
    from orchard_cli.tasks.kit.taskfiles import unpack_archive

    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".archive-") as tmp:
        archive = Path(tmp) / "tree.tar"
        try:
            with archive.open("wb") as out:
                done = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", revision], stdout=out,
                                      stderr=subprocess.PIPE, timeout=ARCHIVE_TIMEOUT, env=source.git_env())
        except FileNotFoundError as exc:
            raise InfraError("git is not installed", hint="apt-get install git") from exc
        if done.returncode != 0:
            raise UsageError(f"git archive in {repo}: {done.stderr.decode(errors='replace').strip()[:300]}")
        try:
            unpack_archive(archive, dest)
        except (tarfile.TarError, OSError) as exc:
            raise UsageError(f"the tree of {revision[:12]} cannot be unpacked: {exc}") from exc


def project_name(tree: Path, repo: Path) -> str:
    """pyproject.toml's [project] name, else setup.cfg's, else the repository folder's name."""
    text = (tree / "pyproject.toml").read_text(errors="replace") if (tree / "pyproject.toml").is_file() else ""
    found = re.search(r'(?ms)^\[project\].*?^name\s*=\s*["\']([^"\']+)["\']', text)
    if not found and (tree / "setup.cfg").is_file():
        found = re.search(r"(?ms)^\[metadata\].*?^name\s*=\s*(\S+)", (tree / "setup.cfg").read_text(errors="replace"))
    name = found.group(1) if found else repo.name.removesuffix(".git")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._") or "repo"


def clean_tree(path: str, commit: str, dest: Path) -> GitSource:
    """Export and commit the tree of --from-repo PATH --commit SHA into `dest`."""
    repo, revision, date = resolve(path, commit)
    export(repo, revision, dest)
    name = project_name(dest, repo)
    clean = source.commit_tree(dest, source.commit_message(name, revision[:12]))
    return GitSource(path=str(repo), revision=revision, package=name, version=revision[:12],
                     commit=clean, committed_at=date)


def build_repository(record: dict[str, Any], dest: Path) -> str:
    """Make `dest` the repository of an instance synthesized from a repository; its commit."""
    origin = GitSource.model_validate(record["source"])
    export(Path(origin.path), origin.revision, dest)
    clean = source.commit_tree(dest, source.commit_message(origin.package, origin.version))
    if clean != origin.commit:
        raise source.SourceMismatch(f"{record['instance_id']}: {origin.path} at {origin.revision[:12]} makes "
                                    f"commit {clean[:12]}, the task recorded {origin.commit[:12]}")
    if (record.get("patch") or "").strip():
        source.apply_reverse(dest, record["patch"])
    commit = source.commit_tree(dest, source.commit_message(origin.package, origin.version))
    if commit != record["base_commit"]:
        raise source.SourceMismatch(f"{record['instance_id']}: rebuilding gives commit {commit[:12]}, "
                                    f"not the recorded base_commit {record['base_commit'][:12]}")
    return commit

"""Where a synthesized task's code comes from: a package's sdist, made into a deterministic repo.

`fetch_sdist` gets `NAME==VERSION`'s source distribution through pip (any index pip is configured
for) into a cache under ORCHARD_HOME and records its sha256. `commit_tree` turns a folder into a
git commit with fixed author, committer, dates and message, files added in sorted order, so the
same bytes give the same commit id on every machine.

A task's repository holds ONE parentless commit: the sdist's tree with the mutation applied
(`base_commit`). The unmutated tree is not in it, so `git log` / `git diff HEAD~1` cannot reveal
the bug. `rebuild_repository(record)` makes it again from the record alone: download, verify the
sha256, unpack, check the clean commit id, apply the reverse of the gold patch, commit, check
`base_commit`. The SWE family calls it for any instance with a `source` field.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchard_cli.errors import InfraError, UsageError
from orchard_cli.home import state_dir
from orchard_cli.records import sha256_file

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip", ".tar")
IDENTITY = ("orchard-synth", "synth@orchard.invalid")
FIXED_DATE = "1704067200 +0000"  # 2024-01-01T00:00:00Z: every synthesized commit carries it
SOURCE_TYPE = "pypi-sdist"
PIP_TIMEOUT = 900


class SourceError(UsageError):
    """The package's source cannot be had (no such version, no sdist, no tests, bad archive)."""


class SourceMismatch(InfraError):
    """What was downloaded or rebuilt is not what the task recorded (sha256 or commit id)."""


class SdistSource(BaseModel):
    """The `source` field of a synthesized instance: enough to rebuild its repository exactly."""

    model_config = ConfigDict(extra="forbid")

    type: str = SOURCE_TYPE
    package: str
    """The name as given on the command line (pip normalizes it)."""
    version: str
    filename: str
    """The archive's file name as the index served it."""
    sha256: str
    """sha256 of that archive: a rebuild refuses any other bytes."""
    commit: str
    """The commit id of the unmutated tree (the sdist as released, made deterministically)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_spec(spec: str) -> tuple[str, str]:
    """'toolz==1.2.0' -> ('toolz', '1.2.0'); anything but an exact pin is a usage error."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*", spec)
    if not match:
        raise UsageError(f"--package {spec!r} is not NAME==VERSION",
                         hint="pin one release, e.g. --package toolz==1.2.0")
    return match.group(1), match.group(2)


# ---- fetching ------------------------------------------------------------------------------

def _archives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(ARCHIVE_SUFFIXES))


def _pip_error(name: str, version: str, output: str) -> str:
    lines = [l.strip() for l in output.splitlines() if l.strip().startswith("ERROR:")]
    versions = re.search(r"\(from versions: ([^)]*)\)", output)
    if versions:
        known = [v.strip() for v in versions.group(1).split(",") if v.strip() and v.strip() != "none"]
        if not known:
            return f"{name}=={version}: pip finds no source distribution of {name!r} on its index"
        shown = ", ".join(known[-6:])
        return f"{name}=={version}: no such release with a source distribution (latest: {shown})"
    if lines:
        return f"{name}=={version}: pip download failed: {lines[-1].removeprefix('ERROR:').strip()[:300]}"
    tail = [l for l in output.splitlines() if l.strip()][-1:] or ["no output"]
    return f"{name}=={version}: pip download failed: {tail[0].strip()[:300]}"


def fetch_sdist(name: str, version: str, sha256: str | None = None) -> Path:
    """The sdist of NAME==VERSION from the cache, else `pip download --no-binary :all:`."""
    folder = state_dir("synth", "sdists", f"{canonical(name)}-{version}")
    found = _archives(folder)
    if found and sha256 and sha256_file(found[0]) != sha256:
        for stale in found:
            stale.unlink()
        found = []
    if not found:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "--disable-pip-version-check", "--dest", tmp, f"{name}=={version}"]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired as exc:
                raise InfraError(f"{name}=={version}: pip download ran past {PIP_TIMEOUT} s") from exc
            if done.returncode != 0:
                message = _pip_error(name, version, done.stdout + "\n" + done.stderr)
                error = SourceError if "no such release" in message or "finds no" in message else InfraError
                raise error(message, hint=f"list its releases: pip index versions {name}")
            got = _archives(Path(tmp))
            if not got:
                raise SourceError(f"{name}=={version}: pip downloaded no source archive")
            got[0].replace(folder / got[0].name)
        found = _archives(folder)
    archive = found[0]
    if sha256:
        actual = sha256_file(archive)
        if actual != sha256:
            raise SourceMismatch(f"{name}=={version}: the index serves {archive.name} with sha256 "
                                 f"{actual[:16]}..., the task recorded {sha256[:16]}...",
                                 hint="the release was replaced on the index; the task cannot be rebuilt")
    return archive


# ---- unpacking -----------------------------------------------------------------------------

def unpack(archive: Path, dest: Path) -> None:
    """Unpack into `dest` (which must be empty), dropping the single top-level folder."""
    from orchard_cli.tasks.kit.taskfiles import unpack_archive

    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".unpack-") as tmp:
        tmp_path = Path(tmp)
        try:  # the guarded loader's (tasks/kit): every entry checked before any is written
            unpack_archive(archive, tmp_path)
        except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
            raise SourceError(f"{archive.name} is not a readable archive: {exc}") from exc
        entries = list(tmp_path.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp_path
        for entry in top.iterdir():
            shutil.move(str(entry), str(dest / entry.name))


# ---- deterministic git ---------------------------------------------------------------------

def git_env() -> dict[str, str]:
    """No user or system config, fixed identity and dates."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
                "GIT_AUTHOR_NAME": IDENTITY[0], "GIT_AUTHOR_EMAIL": IDENTITY[1],
                "GIT_COMMITTER_NAME": IDENTITY[0], "GIT_COMMITTER_EMAIL": IDENTITY[1],
                "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE,
                "LC_ALL": "C", "TZ": "UTC"})
    return env


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                              text=True, env=git_env(), timeout=300)
    except FileNotFoundError as exc:
        raise InfraError("git is not installed", hint="apt-get install git") from exc
    if done.returncode != 0:
        raise InfraError(f"git {args[0]} failed in {repo}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def commit_tree(folder: Path, message: str) -> str:
    """Make `folder` a git repository of one parentless commit of everything in it; its id.

    Fixed identity, dates and message; files (ignored ones too) added in sorted order; nested
    .git folders skipped; no hooks or templates; line endings and modes as they are on disk.
    """
    if (folder / ".git").exists():
        shutil.rmtree(folder / ".git")
    git(folder, "init", "--quiet", "--template=", "--initial-branch=main")
    for key, value in (("core.autocrlf", "false"), ("core.filemode", "true"),
                       ("core.symlinks", "true"), ("commit.gpgsign", "false"), ("gc.auto", "0")):
        git(folder, "config", key, value)
    files: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        rel = Path(root).relative_to(folder)
        files += [(rel / n).as_posix() for n in sorted(names)]
    if not files:
        raise SourceError(f"{folder} holds no files")
    git(folder, "add", "--force", "--pathspec-from-file=-", "--pathspec-file-nul",
        stdin="\0".join(sorted(files)) + "\0")
    git(folder, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)
    return git(folder, "rev-parse", "HEAD").strip()


def commit_message(name: str, version: str) -> str:
    return f"{name} {version}\n\nThe source distribution of {name} {version}.\n"


# ---- rebuilding ----------------------------------------------------------------------------

def clean_tree(name: str, version: str, sha256: str | None, dest: Path) -> tuple[str, str, Path]:
    """Unpack the verified sdist into `dest` and commit it: (commit id, sha256, archive)."""
    archive = fetch_sdist(name, version, sha256)
    digest = sha256_file(archive)
    unpack(archive, dest)
    return commit_tree(dest, commit_message(name, version)), digest, archive


def apply_reverse(repo: Path, patch: str) -> None:
    """Undo the gold patch in the work tree: what the mutation did."""
    try:
        git(repo, "apply", "--reverse", "--whitespace=nowarn", "-", stdin=patch)
    except InfraError as exc:
        raise SourceMismatch(f"the gold patch does not reverse-apply to the sdist: {exc.message}") from exc


def build_repository(record: dict[str, Any], dest: Path) -> str:
    """Make `dest` the repository of a synthesized instance; returns its commit (== base_commit)."""
    source = SdistSource.model_validate(record["source"])
    clean, _, _ = clean_tree(source.package, source.version, source.sha256, dest)
    if clean != source.commit:
        raise SourceMismatch(f"{record['instance_id']}: the sdist makes commit {clean[:12]}, the task "
                             f"recorded {source.commit[:12]} (is git's object format different here?)")
    if (record.get("patch") or "").strip():
        apply_reverse(dest, record["patch"])
    commit = commit_tree(dest, commit_message(source.package, source.version))
    if commit != record["base_commit"]:
        raise SourceMismatch(f"{record['instance_id']}: rebuilding gives commit {commit[:12]}, "
                             f"not the recorded base_commit {record['base_commit'][:12]}")
    return commit


def rebuild_repository(record: dict[str, Any], build: Any = None) -> Path:
    """The (cached) repository of a synthesized instance: one commit, `base_commit`, at HEAD,
    made by `build(record, folder)` (default: from its sdist, build_repository)."""
    if not record.get("source"):
        raise UsageError(f"{record.get('instance_id', '?')} has no 'source': it is not synthesized")
    base = record["base_commit"]
    target = state_dir("synth", "repos") / base
    head = target / ".git" / "HEAD"
    if head.is_file():
        try:
            if git(target, "rev-parse", "HEAD").strip() == base:
                return target
        except InfraError:
            pass
        shutil.rmtree(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{base[:12]}.", dir=target.parent))
    try:
        (build or build_repository)(record, tmp)
        try:
            tmp.replace(target)
        except OSError:  # built meanwhile by another thread or process: theirs is as good
            if not (target / ".git" / "HEAD").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target

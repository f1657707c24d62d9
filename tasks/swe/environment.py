"""Environments for SWE instances on the local backend: built once per recipe, cached.

Layout under ORCHARD_HOME/swe/envs/<key>/ (key: repo, version, recipe hash; see instance.py):
  testbed/       a copy of a pyenv interpreter prefix with the recipe installed (the "conda env")
  artifacts.tar  untracked files the install left in the checkout (egg-info, built extensions)
  env.json       written last: the build is complete (recipe, era date, timings)
  build.log      what the build printed

The instance's sandbox mounts <key>/ at /opt/miniconda3/envs (so the prefix is at
/opt/miniconda3/envs/testbed, where SWE-bench's eval scripts expect it), a shim at
/opt/miniconda3/bin/activate (in a folder mounted at /opt) that provides `conda activate NAME`, and the repository mirror at
/orchard/repo. The build runs in a sandbox of its own (workdir /testbed, network 'full') with the
same paths, so editable installs point at /testbed in every sandbox that uses the environment.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount, SandboxSpec
from orchard_cli.errors import EnvironmentUnavailable as CoreEnvironmentUnavailable
from orchard_cli.home import state_dir
from orchard_cli.tasks.swe.instance import ENV_PREFIX, TESTBED, EnvironmentRecipe

ENVS_MOUNT = "/opt/miniconda3/envs"
REPO_MOUNT = "/orchard/repo"
CACHE_MOUNT = "/orchard/cache"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
BUILD_TIMEOUT = 3600.0
# Lines of pre_install that change the system, not the repository: skipped where the root
# filesystem is the host's and read-only.
SYSTEM_LINE = re.compile(r"^\s*(sudo\s|apt(-get)?\s|locale-gen|update-locale|dpkg|yum\s)|\s/(etc|usr)/")
# Every command starts with the environment active (as in SWE-bench's images), for agents too.
ACTIVE_ENV = {"PATH": f"{ENV_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "CONDA_PREFIX": ENV_PREFIX, "CONDA_DEFAULT_ENV": "testbed", "HOME": "/tmp"}
GIT_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
           "GIT_CONFIG_VALUE_0": "*", "GIT_TERMINAL_PROMPT": "0"}

ACTIVATE_SHIM = """\
# orchard's stand-in for miniconda's bin/activate: `source` it, then `conda activate NAME`
# puts /opt/miniconda3/envs/NAME/bin first on PATH and sets CONDA_PREFIX, as conda does.
conda() {
    case "${1:-}" in
        activate)
            local name="${2:-base}"
            if [ "$name" = base ]; then return 0; fi
            local prefix="/opt/miniconda3/envs/$name"
            if [ ! -x "$prefix/bin/python" ]; then
                echo "conda: environment '$name' is not here ($prefix)" >&2; return 1
            fi
            export PATH="$prefix/bin:${PATH:-/usr/bin:/bin}" CONDA_PREFIX="$prefix" CONDA_DEFAULT_ENV="$name"
            hash -r 2>/dev/null || true ;;
        deactivate) unset CONDA_PREFIX CONDA_DEFAULT_ENV ;;
        *) echo "conda: only 'conda activate' exists in orchard's local environments" >&2; return 1 ;;
    esac
}
"""


class EnvironmentUnavailable(CoreEnvironmentUnavailable):
    """The instance's environment (repository, interpreter, packages) cannot be had: env_error
    in any phase of an episode (the core's EnvironmentUnavailable)."""


def private_name(name: str) -> str:
    """A temporary sibling name of `name` that no other process AND no other thread uses: eval's
    workers are threads of one process, so a pid alone lets two of them write the same temporary
    file and one's rename pulls the file from under the other."""
    return f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"


def envs_root() -> Path:
    return state_dir("swe", "envs")


def env_dir(key: str) -> Path:
    path = envs_root() / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def opt_root() -> Path:
    """The folder mounted at /opt: miniconda3/bin/activate (the shim) and an empty
    miniconda3/envs where the environment is mounted. (Mounted at /opt rather than deeper because
    a bind target cannot be created below a read-only image folder; the host's /opt is hidden.)"""
    root = state_dir("swe", "opt")
    bin_dir = root / "miniconda3" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (root / "miniconda3" / "envs").mkdir(exist_ok=True)
    shim = bin_dir / "activate"
    if not shim.exists() or shim.read_text() != ACTIVATE_SHIM:
        tmp = bin_dir / private_name("activate")
        tmp.write_text(ACTIVATE_SHIM)
        tmp.chmod(0o755)
        tmp.replace(shim)
    return root


def is_built(key: str) -> bool:
    return (envs_root() / key / "env.json").is_file()


def read_marker(key: str) -> dict[str, Any]:
    return json.loads((envs_root() / key / "env.json").read_text())


# ---- the repository ------------------------------------------------------------------------

def find_mirror(repo: str, repo_mirror: str | None) -> Path | None:
    """`owner/name` or `owner__name` (bare or not, optional .git) in the mirror folder."""
    if not repo_mirror:
        return None
    root = Path(repo_mirror).expanduser()
    owner, _, name = repo.partition("/")
    for candidate in (root / owner / name, root / f"{owner}__{name}", root / owner / f"{name}.git",
                      root / f"{owner}__{name}.git"):
        if (candidate / ".git").exists() or (candidate / "HEAD").is_file():
            return candidate
    return None


def repository(repo: str, repo_mirror: str | None) -> Path:
    """A local git repository of `repo`: from the mirror folder, else cloned from GitHub once."""
    found = find_mirror(repo, repo_mirror)
    if found:
        return usable_repository(found, repo)
    if repo_mirror:
        raise EnvironmentUnavailable(
            f"the repository mirror {repo_mirror} has no {repo} (looked for {repo} and "
            f"{repo.replace('/', '__')})")
    target = state_dir("swe", "repos") / f"{repo.replace('/', '__')}.git"
    if (target / "HEAD").is_file():
        return target
    url = f"https://github.com/{repo}"
    tmp = target.with_name(private_name(target.name))
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        subprocess.run(["git", "clone", "--mirror", "--quiet", url, str(tmp)], check=True,
                       capture_output=True, text=True, timeout=1800, env={**os.environ, **GIT_ENV})
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        last = (exc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentUnavailable(f"could not clone {url}: {last[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EnvironmentUnavailable(f"cloning {url} took over 30 minutes") from exc
    try:
        tmp.replace(target)
    except OSError:  # cloned meanwhile by another worker: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "HEAD").is_file():
            raise
    return target


def usable_repository(found: Path, repo: str) -> Path:
    """`found` itself, or, for a repository git refuses because it lacks the (empty) `refs/`
    folder an archive or a read-only copy may drop, a copy with that folder, made once under
    ORCHARD_HOME/swe/repos (the mirror may be read-only)."""
    git_dir = found / ".git" if (found / ".git").is_dir() else found
    if (git_dir / "refs").is_dir() or not (git_dir / "objects").is_dir():
        return found
    target = state_dir("swe", "repos") / f"{repo.replace('/', '__')}.fixed.git"
    if (target / git_dir.relative_to(found) / "refs").is_dir():
        return target
    tmp = target.with_name(private_name(target.name))
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(found, tmp, symlinks=True)
    for folder in (tmp, *[p for p in tmp.rglob("*") if p.is_dir()]):
        folder.chmod(0o755)  # the copy of a read-only tree must be writable to be replaced later
    fixed = tmp / git_dir.relative_to(found)
    (fixed / "refs" / "heads").mkdir(parents=True)
    (fixed / "refs" / "tags").mkdir()
    try:
        tmp.replace(target)
    except OSError:  # made meanwhile by another worker
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# The files a project declares its own dependencies in (its install line reads them).
DEPENDENCY_FILES = ("setup.py", "setup.cfg", "pyproject.toml")


def build_commit(record: dict[str, Any], recipe: EnvironmentRecipe, repo_path: Path) -> tuple[str, str]:
    """Where the environment's install lines run, and the suffix that keeps its key apart.

    SWE-bench builds an environment at `environment_setup_commit` and installs the project again
    at each instance's `base_commit`, with the network, into that instance's own image. orchard
    shares one build among the instances of a repo/version, so an instance whose base commit
    declares other dependencies than the setup commit (pytest 5.4's later commits add wcwidth)
    gets a build of its own, installed at its base commit and keyed by those declarations;
    instances declaring the same ones share it. Declarations, not texts: a setup.py that changes
    only outside its requirements (sympy's `packages` list) declares the same (era.declared)."""
    base = record["base_commit"]
    setup = record.get("environment_setup_commit") or base
    if setup == base or not has_commit(repo_path, base):
        return setup, ""  # a base commit the mirror lacks is the instance's setup error, not the build's

    from orchard_cli.tasks.swe.era import declared as declarations

    def declared(commit: str) -> bytes:
        names = (*DEPENDENCY_FILES, *recipe.requirements_files, *recipe.conda_files)
        return b"".join(name.encode() + b"\0" + declarations(name, git_show(repo_path, commit, name)).encode() + b"\0"
                        for name in names)

    mine = declared(base)
    if mine == declared(setup):
        return setup, ""
    return base, "-deps" + hashlib.sha256(mine).hexdigest()[:8]


def has_commit(repository_path: Path, commit: str) -> bool:
    result = subprocess.run(["git", "-C", str(repository_path), "cat-file", "-e", f"{commit}^{{commit}}"],
                            capture_output=True, env={**os.environ, **GIT_ENV})
    return result.returncode == 0


def git_show(repository_path: Path, commit: str, path: str) -> str | None:
    result = subprocess.run(["git", "-C", str(repository_path), "show", f"{commit}:{path}"],
                            capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    return result.stdout if result.returncode == 0 else None


def checkout_script(commit: str) -> list[str]:
    """Shell lines that put the mirror's `commit` into /testbed, as SWE-bench's repo setup does."""
    return [f"cd {TESTBED}",
            f"git clone --no-hardlinks --quiet {REPO_MOUNT} {TESTBED}",
            f"git -c advice.detachedHead=false checkout --quiet --force {commit}",
            "git remote remove origin"]


# ---- the sandbox ---------------------------------------------------------------------------

def grading_network(backend: str) -> str:
    """The network of an instance's sandboxes: 'drop' where the backend can give it (nothing
    reachable, but a connect waits for its timeout as on the networked machines the tests were
    written for: requests' connect-timeout tests), else 'none'."""
    from orchard_cli.env import netdrop

    return "drop" if backend == "kubernetes" or netdrop.available() is None else "none"


def local_spec(key: str, repo_path: Path, *, python: Path | None = None, network: str | None = None,
               writable_env: bool = False, timeout: int = 4 * 3600,
               labels: dict[str, str] | None = None) -> SandboxSpec:
    """A local sandbox for environment `key`. `python`: the pyenv prefix the environment's
    interpreter was copied from, bound at its own path (the copy's RUNPATH finds libpython
    there; a 'host' sandbox does not see the rest of the host's home folders)."""
    cache = state_dir("swe", "cache")
    mounts = [Mount(source=str(opt_root()), target="/opt"),
              Mount(source=str(env_dir(key)), target=ENVS_MOUNT, read_only=not writable_env),
              Mount(source=str(repo_path), target=REPO_MOUNT)]
    if python is not None:
        mounts.append(Mount(source=str(python), target=str(python)))
    if writable_env:
        mounts.append(Mount(source=str(cache), target=CACHE_MOUNT, read_only=False))
    return SandboxSpec(image="host", workdir=TESTBED, network=network or grading_network("local"), memory="8Gi", cpu=2.0,
                       pids=4096, timeout=timeout, env={**GIT_ENV, **ACTIVE_ENV}, mounts=mounts,
                       labels=labels or {})


# ---- building ------------------------------------------------------------------------------

@contextmanager
def build_lock(key: str) -> Iterator[None]:
    with open(env_dir(key) / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def interpreter(version: str) -> Path:
    """The newest pyenv interpreter prefix of `version` ('3.9' -> .../versions/3.9.18)."""
    found = sorted((p for p in PYENV_ROOT.glob(f"{version}.*") if (p / "bin").is_dir()),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)])
    if not found:
        have = ", ".join(sorted(p.name for p in PYENV_ROOT.glob("*"))) or "none"
        raise EnvironmentUnavailable(f"no Python {version} interpreter under {PYENV_ROOT} "
                                     f"(have: {have})", )
    return found[-1]


PINNED = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*[^,;*]+$")
KEEP_SITE = re.compile(r"^(pip|setuptools|wheel|pkg_resources|_distutils_hack|distutils-precedence\.pth)"
                       r"([-.].*)?$")


def copy_prefix(source: Path, target: Path) -> None:
    """Copy an interpreter prefix without its site-packages (but pip/setuptools/wheel), and point
    the scripts of its bin/ at the prefix's place inside the sandbox. The standard library, the
    headers and the shared objects are hard links to the interpreter's own files where the
    filesystem allows (~100 MB per environment otherwise; on disk once for every environment of
    that Python); bin/ and site-packages, which builds change, are copies."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder).name == "site-packages":
            return {n for n in names if not KEEP_SITE.match(n)}
        return {n for n in names if n == "__pycache__"}

    def link_or_copy(src: str, dst: str) -> None:
        part = Path(src).relative_to(source).parts
        if part[0] != "bin" and "site-packages" not in part:
            try:
                os.link(src, dst)
                return
            except OSError:  # another filesystem, or links not allowed: a copy
                pass
        shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, ignore=ignore, copy_function=link_or_copy)
    for script in (target / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        head = script.read_bytes()[:256]
        if head.startswith(b"#!") and str(source).encode() in head.split(b"\n")[0]:
            data = script.read_bytes().replace(str(source).encode(), ENV_PREFIX.encode(), 1)
            script.write_bytes(data)


# A shell line's commands (split at `&&`, `||`, `;`, `|`) and their redirections.
SHELL_SPLIT = re.compile(r"&&|\|\||[;|]")
REDIRECTION = re.compile(r"^\d*[<>]")


def system_lines(recipe: EnvironmentRecipe) -> list[str]:
    """The recipe's system-wide pre_install lines (`apt-get install -y graphviz`, `locale-gen`),
    which no environment build runs: a local sandbox sees the host's system, orchard's docker
    image runs them."""
    return [line for line in recipe.pre_install if SYSTEM_LINE.search(line)]


def system_packages(recipe: EnvironmentRecipe) -> list[str]:
    """The Debian packages the recipe's system-wide lines install (sphinx 7.x: graphviz)."""
    found: list[str] = []
    for line in system_lines(recipe):
        for command in SHELL_SPLIT.split(line):
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            while words and ("=" in words[0] or words[0] in ("sudo", "env")):
                words = words[1:]  # DEBIAN_FRONTEND=noninteractive apt-get ...
            if not words or words[0] not in ("apt", "apt-get") or "install" not in words:
                continue
            rest, skip = words[words.index("install") + 1:], False
            for word in rest:
                if skip:
                    skip = False
                elif word in ("-o", "--option", "-t", "--target-release", "-c", "--config-file"):
                    skip = True  # an option's value, not a package
                elif not word.startswith("-") and not REDIRECTION.match(word) and word not in found:
                    found.append(word)
    return found


def missing_on_host(packages: list[str]) -> list[str] | None:
    """Those of `packages` this host has not installed; None where dpkg cannot say."""
    if not packages:
        return []
    try:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n", *packages],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode not in (0, 1):  # 1: some are unknown to dpkg, which is an answer
        return None
    installed = {line.split()[0] for line in done.stdout.splitlines() if line.endswith(" installed")}
    return [p for p in packages if p not in installed]


def requirement_lines(text: str) -> list[str]:
    """A requirements file as SWE-bench reads it: no '-e .', comments or '.[test' lines."""
    return [line.strip() for line in text.splitlines() if line.strip()
            and not any(line.strip().startswith(x) for x in ("-e .", "#", ".[test", "-r"))]


def conda_yml_requirements(text: str) -> list[str]:
    """The pip-installable part of an environment.yml: conda deps (mapped) and its pip list."""
    import yaml

    from orchard_cli.tasks.swe.instance import conda_to_pip

    data = yaml.safe_load(text) or {}
    out = []
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict):
            out += [str(p) for p in dep.get("pip") or []]
        elif isinstance(dep, str) and dep.split("=")[0].split("<")[0].split(">")[0].strip() not in (
                "python", "pip", "setuptools"):
            out.append(conda_to_pip(dep.replace(" ", "")))
    return out


def editable(line: str) -> str:
    """Install lines moved to build time must keep pointing at /testbed: make them editable."""
    stripped = line.strip()
    if stripped == "python setup.py install":
        return "python -m pip install -e ."
    match = re.match(r"^(python -m pip|pip) install (\.(\[[^\]]*\])?)(\s.*)?$", stripped)
    if match:
        return f"python -m pip install -e {match.group(2)}{match.group(4) or ''}"
    return line


PLAIN_EDITABLE = re.compile(r"^python -m pip install -e (\.(\[[^\]]*\])?)$")
# Every installed distribution's name but the build tools, as uv options exempting it from the
# era date (an sdist builds with the era's setuptools: setuptools_scm 3 needs its pkg_resources).
INSTALLED_EXEMPT = ("$(python -m pip list --format=freeze 2>/dev/null | sed -e 's/==.*//' "
                    "| grep -viE '^(pip|setuptools|wheel)$' "
                    "| sed -e 's/.*/--exclude-newer-package &=2100-01-01T00:00:00Z/' | tr '\\n' ' ')")
# The requirements of the project pip is about to install (its --dry-run --report), extras and
# markers evaluated: what the project itself asks for, nothing resolved yet.
PROJECT_REQUIREMENTS = """python - <<'EOF_ORCHARD'
import json
from pip._vendor.packaging.requirements import Requirement
report = json.load(open("/tmp/orchard-report.json"))
with open("/tmp/orchard-project.txt", "w") as out:
    for item in report["install"]:
        if not item.get("is_direct"):
            continue
        extras = set(item.get("requested_extras") or []) | {""}
        for text in item["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if req.url is None and (req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras)):
                out.write(req.name + ("[%s]" % ",".join(sorted(req.extras)) if req.extras else "")
                          + str(req.specifier) + "\\n")
EOF_ORCHARD"""


def era_install(line: str, uv_install: str, uv_today: str) -> list[str]:
    """`pip install -e .[extras]`, built and resolved as of the instance's day. Its build
    requirements (era.BUILD_REQUIRES; then what its backend's hooks ask for, era.BUILD_HOOKS) are
    installed into the environment as of the era date, and
    pip builds without isolation, as the official conda environments do (an isolated build takes
    today's setuptools, Cython, numpy: a C extension compiled against today's numpy does not
    import at the era's). The project's own dependencies: pip alone takes today's (a docutils
    that no longer ships what sphinx 3.x imports), so pip first says what the project requires
    (a dry run: its metadata), uv installs those requirements with the era date (what is
    installed already stays when it satisfies them: it is exempt from the date), then pip's own
    line installs the project, finding them satisfied. Lines with options of their own run as
    written; without a pip that can --report (22.2+) the dry run is skipped."""
    from orchard_cli.tasks.swe.era import BUILD_HOOKS, BUILD_REQUIRES

    match = PLAIN_EDITABLE.match(line.strip())
    if not match:
        return [line]
    target = shlex.quote(match.group(1))
    installs = []
    for script, requires in ((BUILD_REQUIRES, "/tmp/orchard-build-requires.txt"),
                             (f"env $ORCHARD_SCM {BUILD_HOOKS}", "/tmp/orchard-build-hooks.txt")):
        installs += [script, f"if test -s {requires}; then {uv_install} {INSTALLED_EXEMPT} -r {requires} || "
                             f"{{ echo 'orchard: the build requirements resolve only without the era date' >&2; "
                             f"{uv_today} {INSTALLED_EXEMPT} -r {requires}; }}; fi"]
    return [*installs,
            f"if env $ORCHARD_SCM python -m pip install -q --no-build-isolation --dry-run --report "
            f"/tmp/orchard-report.json -e {target}; then",
            PROJECT_REQUIREMENTS,
            f"test -s /tmp/orchard-project.txt && {uv_install} {INSTALLED_EXEMPT} -r /tmp/orchard-project.txt",
            "fi", f"env $ORCHARD_SCM {line} --no-build-isolation"]


def build_script(recipe: EnvironmentRecipe, commit: str, deps: list[str], date: str,
                 uv: str, version: str = "") -> str:
    """The build, in SWE-bench's order: checkout, pre_install, the requirements, the install
    lines. Requirements install in two uv steps. Those without an exact pin resolve as of the era
    date (`--exclude-newer`), so an unpinned `numpy` is the numpy of the instance's day. Exact pins
    (`tox==4.16.0`: SWE-bench's specs pin some packages to releases newer than the instance) then
    install with their dependency closure resolved as of the build, as the official images resolve
    them when they are built: a pin's own dependencies may be newer than the era (tox 4.16 needs
    cachetools>=5.3.3, released three years after a sphinx 3.5 instance), but the build tools of
    any sdist among them as of the era (era.tool_limits). A checkout without tags (a depth-1
    mirror) gets the dataset's version for setuptools-scm, said in the build log."""
    from orchard_cli.tasks.swe.era import tool_limits

    uv_install = f"{shlex.quote(uv)} pip install --python {ENV_PREFIX}/bin/python"
    pinned = [d for d in deps if PINNED.match(d)]
    era = [d for d in deps if not PINNED.match(d)]
    lines = ["set -euxo pipefail",
             f"export UV_CACHE_DIR={CACHE_MOUNT}/uv PIP_CACHE_DIR={CACHE_MOUNT}/pip UV_SYSTEM_CERTS=1",
             *checkout_script(commit), "source /opt/miniconda3/bin/activate", "conda activate testbed",
             "python -m pip --version || python -m ensurepip"]
    lines.append("ORCHARD_SCM=")
    if re.fullmatch(r"\d+(\.\d+)*", version or ""):  # for the project's own install lines only
        lines.append(f"if ! git describe --tags >/dev/null 2>&1 && grep -qsiE 'setuptools[_-]scm' pyproject.toml "
                     f"setup.py setup.cfg; then ORCHARD_SCM=SETUPTOOLS_SCM_PRETEND_VERSION={version}; "
                     f"echo 'orchard: no tags in this checkout: setuptools-scm gets the dataset version {version}' >&2; fi")
    for line in recipe.pre_install:
        lines.append(f": orchard skipped a system-wide line: {shlex.quote(line)}"
                     if SYSTEM_LINE.search(line) else line)
    for name, group, options in (("era", era, f" --exclude-newer {shlex.quote(date)}"),
                                 ("pinned", pinned, tool_limits(pinned, date))):
        if group:
            lines.append(f"cat > /tmp/orchard-{name}.txt <<'EOF_ORCHARD'\n" + "\n".join(group) + "\nEOF_ORCHARD")
            lines.append(f"{uv_install}{options} -r /tmp/orchard-{name}.txt")
    for line in recipe.install:
        lines += era_install(editable(line), f"{uv_install} --exclude-newer {shlex.quote(date)}", uv_install)
    lines.append(f"git ls-files --others -z | tar --null -T - -cf {ENVS_MOUNT}/artifacts.tar")
    return "\n".join(lines) + "\n"


# Package-index settings a build takes from orchard's own environment (a company mirror).
INDEX_SETTINGS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_INSECURE_HOST",
                  "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")


def index_settings() -> dict[str, str]:
    """The package-index settings set for orchard, for the build sandbox; one with credentials in
    it (`user:token@`) stays out of the sandbox, which runs the project's own setup code."""
    found = {}
    for name in INDEX_SETTINGS:
        value = os.environ.get(name)
        if value and not re.search(r"://[^/\s]*@", value):
            found[name] = value
    return found


# When each CPython minor version came out. A package released before its interpreter may not run
# on it (the importlib-metadata of a 2019 pytest instance, which SWE-bench runs on Python 3.9,
# breaks on 3.9's own importlib.metadata), so no environment's era is older than its Python.
PYTHON_RELEASED = {"2.7": "2010-07-03", "3.5": "2015-09-13", "3.6": "2016-12-23", "3.7": "2018-06-27",
                   "3.8": "2019-10-14", "3.9": "2020-10-05", "3.10": "2021-10-04", "3.11": "2022-10-24",
                   "3.12": "2023-10-02", "3.13": "2024-10-07", "3.14": "2025-10-07"}


def commit_date(repository_path: Path, commit: str) -> str | None:
    """The commit's committer date, or None when the repository lacks it."""
    result = subprocess.run(["git", "-C", str(repository_path), "log", "-1", "--format=%cI", commit, "--"],
                            capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def utc(value: str, what: str = "a date") -> str:
    """A date (the end of that day) or an RFC 3339 time, as uv's --exclude-newer UTC form."""
    value = str(value).strip().replace(" ", "T")
    if re.match(r"^\d{4}-\d{2}-\d{2}$", value):
        value += "T23:59:59Z"
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise EnvironmentUnavailable(f"{what} is not a date: {value!r} (YYYY-MM-DD or RFC 3339)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def era_date(recipe: EnvironmentRecipe, record: dict[str, Any], repo_path: Path | None,
             built_at: str | None = None) -> str:
    """The --exclude-newer date: the recipe's or ORCHARD_SWE_EXCLUDE_NEWER when set; else the
    time of the environment's setup commit (the instances of a version share one environment,
    built from that commit's declarations: the dependencies it could know), or of the commit the
    build installs at (`build_commit`: a base commit declaring other dependencies) when that is
    later; the instance's created_at when the repository lacks them or the instance was
    synthesized (`orchard tasks synth`: the day of its synthesis); never before the recipe's
    Python came out (PYTHON_RELEASED)."""
    explicit = recipe.exclude_newer or os.environ.get("ORCHARD_SWE_EXCLUDE_NEWER")
    if explicit:
        return utc(explicit, "exclude_newer")
    commits = [] if record.get("source") or repo_path is None else [  # synthesized: placeholder dates
        c for c in {record.get("environment_setup_commit") or record.get("base_commit"), built_at} if c]
    days = [utc(d, "a commit date") for d in (commit_date(repo_path, c) for c in commits) if d]
    if not days and record.get("created_at"):
        days = [utc(record["created_at"], "created_at")]
    if not days:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    released = PYTHON_RELEASED.get(".".join(str(recipe.python).split(".")[:2]))
    return max(days + ([released + "T00:00:00Z"] if released else []))


def staged_uv() -> str:
    """uv as the build sandbox sees it: a copy under the folder mounted at /opt. The host's uv may
    live anywhere (a venv under /tmp, which every sandbox replaces with its own), so the build
    never runs it by its host path."""
    source = Path(uv_binary())
    target = opt_root() / "orchard" / "bin" / "uv"
    if not target.exists() or target.stat().st_size != source.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(private_name("uv"))
        shutil.copy2(source, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    return "/opt/orchard/bin/uv"


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvironmentUnavailable("building SWE environments needs uv, which is not installed; "
                                         "pip install 'orchard-cli[swe]'")
        return found


def ensure_local(env: Any, key: str, recipe: EnvironmentRecipe, record: dict[str, Any],
                 repo_path: Path) -> dict[str, Any]:
    """Build the environment `key` unless it is built; return its marker (env.json)."""
    if is_built(key):
        return read_marker(key)
    with build_lock(key):
        if is_built(key):
            return read_marker(key)
        return _build_local(env, key, recipe, record, repo_path)


def _build_local(env: Any, key: str, recipe: EnvironmentRecipe, record: dict[str, Any],
                 repo_path: Path) -> dict[str, Any]:
    started = time.time()
    folder = env_dir(key)
    prefix = folder / "testbed"
    for stale in (prefix, folder / "artifacts.tar"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    source = interpreter(recipe.python)
    copy_prefix(source, prefix)
    setup_commit = record.get("environment_setup_commit") or record["base_commit"]
    commit, _ = build_commit(record, recipe, repo_path)
    deps = list(recipe.packages)
    for files, reader in ((recipe.requirements_files, requirement_lines),
                          (recipe.conda_files, conda_yml_requirements)):
        for name in files:
            text = git_show(repo_path, setup_commit, name)
            if text is not None:
                deps += reader(text)
                break
        else:
            if files:
                raise EnvironmentUnavailable(f"{record['repo']}@{setup_commit[:12]} has none of {', '.join(files)}")
    from orchard_cli.tasks.swe import era

    deps, changes = era.adjust(deps, recipe.python, index_settings())
    date = era_date(recipe, record, repo_path, commit)
    script = build_script(recipe, commit, deps, date, staged_uv(), str(record.get("version") or ""))
    spec = local_spec(key, repo_path, python=source, network="full", writable_env=True,
                      timeout=int(BUILD_TIMEOUT) + 600, labels={"orchard.swe": "env-build"})
    spec.env.update(index_settings())
    try:
        sandbox = SandboxHandle.create(env, spec)
    except Exception as exc:
        raise EnvironmentUnavailable(f"could not start the build sandbox for {key}: {exc}") from exc
    try:
        sandbox.write_file("/tmp/orchard-build.sh", script)
        job = sandbox.exec("bash /tmp/orchard-build.sh > /tmp/orchard-build.log 2>&1",
                           timeout=BUILD_TIMEOUT)
        log = sandbox.read_file("/tmp/orchard-build.log").decode(errors="replace")
    finally:
        sandbox.destroy()
    (folder / "build.log").write_text(log)
    if not job.ok:
        cause = "timed out" if job.timed_out else f"exit {job.exit_code}"
        last = next((l for l in reversed(log.splitlines()) if l.strip() and not l.startswith("+")),
                    job.error or "no output")
        raise EnvironmentUnavailable(f"building the environment {key} failed ({cause}): {last.strip()[:300]}"
                                     f" — see {folder / 'build.log'}")
    marker = {"key": key, "repo": record["repo"], "version": record.get("version", ""),
              "recipe": recipe.model_dump(), "python": str(source), "exclude_newer": date,
              "commit": commit, "built_at": time.time(), "build_seconds": round(time.time() - started, 2),
              "era": changes}
    tmp = folder / ".env.json.tmp"
    tmp.write_text(json.dumps(marker, indent=1))
    tmp.replace(folder / "env.json")
    return marker


def instance_setup_script(recipe: EnvironmentRecipe, base_commit: str) -> str:
    """Per instance, no network: checkout, the build's leftovers, pre_install again, a commit so
    `git diff` shows only the agent's changes (as SWE-bench's instance images do)."""
    lines = ["set -uxo pipefail", *checkout_script(base_commit),
             f"if [ -s {ENVS_MOUNT}/artifacts.tar ]; then tar -xf {ENVS_MOUNT}/artifacts.tar -C {TESTBED}; fi",
             "source /opt/miniconda3/bin/activate", "conda activate testbed"]
    lines += [line for line in recipe.pre_install if not SYSTEM_LINE.search(line)]
    lines += ["git -c user.name=SWE-bench -c user.email=setup@swebench.config commit --quiet "
              "--allow-empty -am SWE-bench", "git status --short | head -5", "true"]
    return "\n".join(lines) + "\n"

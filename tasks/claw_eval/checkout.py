"""A Claw-Eval checkout the user names, and the Python environment its services and graders run in.

The environment is made once per dependency set (the content of the checkout's requirements.txt
and pyproject.toml, and the Python version) with uv under ORCHARD_HOME/claw-eval/envs/<key>/,
never in orchard's own; the resolved versions go to <key>.lock beside it. Orchard never imports
the checkout: `helper.py` runs in that environment and answers over JSON. Grading goes to warm
helpers (`helper.py serve`, the checkout imported once each): one per grade in flight at most,
kept for the next; a helper that fails or outlives its timeout is killed and a new one started.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

from orchard_cli.errors import InfraError, UsageError
from orchard_cli.home import state_dir

HELPER = Path(__file__).with_name("helper.py")
MARKER = "\n@@ORCHARD@@"
REQUIRED_MODULES = ("claw_eval.models.task", "claw_eval.graders.registry", "claw_eval.models.trace",
                    "claw_eval.models.scoring")
EXTRAS = ("mock",)
"""pyproject extras the mock services need (Claw-Eval: fastapi, uvicorn, pypdf, ...)."""
PYTHON_ENV = "ORCHARD_CLAW_EVAL_PYTHON"
"""An interpreter to use instead of a managed environment (it must have the checkout's deps)."""


class CheckoutError(InfraError):
    """The checkout's environment could not be made, or its helper failed."""


def uv_command() -> list[str]:
    found = Path(sys.executable).with_name("uv")
    if found.exists():
        return [str(found)]
    which = shutil.which("uv")
    return [which] if which else [sys.executable, "-m", "uv"]


class Checkout:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()
        if not (self.root / "tasks").is_dir():
            raise UsageError(f"{root}: not a Claw-Eval checkout (no tasks/ folder)",
                             hint="orchard eval claw-eval --dataset PATH/TO/claw-eval")
        for name in REQUIRED_MODULES:
            rel = Path("src", *name.split(".")).with_suffix(".py")
            if not (self.root / rel).is_file():
                raise UsageError(f"{self.root}: the checkout lacks {name} ({rel}), which orchard needs")
        self._python: str | None = None
        self._idle: list[Grader] = []
        self._lock = threading.Lock()
        self._generation = 0
        """Bumped by `close`: a helper from before it is not kept."""

    # ---- identity ----------------------------------------------------------------------------
    def commit(self) -> str | None:
        job = subprocess.run(["git", "-C", str(self.root), "rev-parse", "HEAD"], capture_output=True, text=True)
        return job.stdout.strip() if job.returncode == 0 else None

    def requirements(self) -> list[str]:
        """The checkout's declared dependencies: requirements.txt, else pyproject's; plus the
        extras the mock services need."""
        reqs: list[str] = []
        txt = self.root / "requirements.txt"
        pyproject = self.root / "pyproject.toml"
        project: dict[str, Any] = {}
        if pyproject.is_file():
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if txt.is_file():
            reqs = [ln.split("#")[0].strip() for ln in txt.read_text(encoding="utf-8").splitlines()]
        else:
            reqs = list(project.get("dependencies", []))
        for extra in EXTRAS:
            reqs += project.get("optional-dependencies", {}).get(extra, [])
        return sorted({r for r in reqs if r and not r.startswith("-")})

    def env_key(self) -> str:
        digest = hashlib.sha256(json.dumps([self.requirements(), sys.version_info[:2]]).encode()).hexdigest()
        return digest[:16]

    # ---- the environment ---------------------------------------------------------------------
    def python(self) -> str:
        """The environment's interpreter, made now when it is not there yet (thread- and
        process-safe: one maker per key, the others wait)."""
        if self._python:
            return self._python
        if os.environ.get(PYTHON_ENV):
            self._python = os.environ[PYTHON_ENV]
            return self._python
        envs = state_dir("claw-eval", "envs")
        key = self.env_key()
        target = envs / key
        python = target / "bin" / "python"
        with open(envs / f"{key}.mutex", "w") as mutex:
            fcntl.flock(mutex, fcntl.LOCK_EX)
            if not python.exists():
                self._make(target)
        self._python = str(python)
        return self._python

    def _make(self, target: Path) -> None:
        building = target.with_name(target.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        uv = uv_command()
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        steps = [[*uv, "venv", "-q", str(building), "--python", sys.executable if sys.version_info >= (3, 11) else ">=3.11"],
                 [*uv, "pip", "install", "-q", "--python", str(building / "bin" / "python"), *self.requirements()]]
        for step in steps:
            job = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if job.returncode != 0:
                shutil.rmtree(building, ignore_errors=True)
                tail = " ".join((job.stderr or job.stdout).split())[-300:]
                raise CheckoutError(f"making the Claw-Eval environment (python {version}) failed: {tail}")
        freeze = subprocess.run([*uv, "pip", "freeze", "--python", str(building / "bin" / "python")],
                                capture_output=True, text=True)
        building.rename(target)
        target.with_name(target.name + ".lock").write_text(
            f"# resolved for {self.root} ({self.commit() or 'no git'}), python {version}\n" + freeze.stdout,
            encoding="utf-8")

    def lock_file(self) -> Path:
        return state_dir("claw-eval", "envs") / f"{self.env_key()}.lock"

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "pythonpath", "virtual_env")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.root / "src"), str(self.root)])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    # ---- the helper --------------------------------------------------------------------------
    def grade(self, payload: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        """The task's grader on one episode, in a warm helper."""
        with self._lock:
            grader = self._idle.pop() if self._idle else None
            generation = self._generation
        if grader is None:
            grader = Grader(self)
            grader.generation = generation
        try:
            answer = grader.ask(payload, timeout)
        except BaseException:
            grader.stop()
            raise
        with self._lock:
            keep = grader.generation == self._generation
            if keep:
                self._idle.append(grader)
        if not keep:  # closed while this grade ran: not kept for a run that is over
            grader.stop()
        if answer.get("error"):
            raise CheckoutError(f"claw-eval grade failed: {answer['error']}")
        return answer

    def close(self) -> None:
        """Stop the warm helpers (a later grade starts new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for grader in idle:
            grader.stop()

    def helper(self, op: str, payload: dict[str, Any] | None = None, timeout: float = 300) -> dict[str, Any]:
        job = subprocess.run([self.python(), str(HELPER), op, str(self.root)], cwd=self.root, env=self.environ(),
                             input=json.dumps(payload) if payload is not None else "", capture_output=True,
                             text=True, timeout=timeout)
        if job.returncode == 3:
            raise UsageError(f"{self.root}: the checkout lacks a module orchard needs: {job.stderr.strip().splitlines()[-1]}")
        if job.returncode != 0 or MARKER not in job.stdout:
            tail = (job.stderr or job.stdout).strip().splitlines()
            raise CheckoutError(f"claw-eval {op} failed: {tail[-1] if tail else f'exit {job.returncode}'}")
        return json.loads(job.stdout.rsplit(MARKER, 1)[1])


class Grader:
    """One warm `helper.py serve` process: a request line in, an answer line out."""

    def __init__(self, checkout: Checkout) -> None:
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # its stderr, for the last line of a failure
        self.proc = subprocess.Popen([checkout.python(), str(HELPER), "serve", str(checkout.root)], cwd=checkout.root,
                                     env=checkout.environ(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, encoding="utf-8")
        self.root = checkout.root
        self.generation = 0

    def ask(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One grade; the request is written from a thread of its own, so a helper that stops
        reading (a pipe full of a large request) cannot hold the caller past `timeout`."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        request = json.dumps({"op": "grade", "payload": payload}) + "\n"  # ASCII: any string survives the pipe

        def send() -> None:
            try:
                self.proc.stdin.write(request)  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass  # it died: the read below says why

        writer = threading.Thread(target=send, name="claw-eval-grade-request", daemon=True)
        writer.start()
        writer.join(timeout)
        if writer.is_alive():
            raise CheckoutError(f"claw-eval grade did not take its request within {timeout:g} s")
        line = self._readline(max(0.0, deadline - time.monotonic()))
        if line is None:
            if self.proc.poll() == 3:
                raise UsageError(f"{self.root}: the checkout lacks a module orchard needs: {self._last_error()}")
            raise CheckoutError(f"claw-eval grade failed: {self._last_error() or 'the grading helper ended'}")
        try:
            return json.loads(line[len(MARKER.lstrip()):])
        except ValueError:
            raise CheckoutError(f"claw-eval grade failed: the grading helper's answer was cut short "
                                f"({self._last_error() or 'no message'})") from None

    def _readline(self, timeout: float) -> str | None:
        stdout = self.proc.stdout
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckoutError(f"claw-eval grade did not answer within {timeout:g} s")
                if selector.select(left):
                    line = stdout.readline()  # type: ignore[union-attr]
                    if not line:
                        try:
                            self.proc.wait(timeout=10)
                        except subprocess.TimeoutExpired:
                            self.proc.kill()
                        return None
                    if line.startswith(MARKER.lstrip()):
                        return line

    def _last_error(self) -> str:
        self.log.seek(0)
        lines = [ln.strip() for ln in self.log.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - it will not end politely
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - a pipe of a killed process may refuse
                pass
        self.log.close()

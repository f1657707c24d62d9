"""The one pool of episode workers: eval, distill and everything else that runs attempts use it.

- `workers` episodes at a time (threads: the work is waiting on sandboxes and models);
- with several workers, episodes are queued round-robin over the family's environments
  (`env_key`), so two workers start on different environments instead of one waiting on the
  other's build;
- every sandbox an episode holds gets a heartbeat every `HEARTBEAT_SECONDS` (a service reaps
  sandboxes whose client stopped sending them);
- each result reaches `on_result` in the calling thread, one at a time, as it finishes (the sinks
  write it to disk before the next);
- Ctrl-C and SIGTERM stop the run within seconds: no new sandboxes, queued episodes cancelled, the
  family's builds interrupted, every live sandbox destroyed, a short grace for running episodes;
  then KeyboardInterrupt goes up (exit 130). Resume is the caller's: it leaves finished episode ids
  out of `episodes`; a kill -9 loses only the episodes that had not finished.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from typing import TYPE_CHECKING, Any

from orchard_cli.family import RunOptions
from orchard_cli.outcome import Outcome
from orchard_cli.rollout.episode import Episode, EpisodeResult, LiveSandboxes, run_episode
from orchard_cli.rollout.live import LiveBoard, current_board

if TYPE_CHECKING:
    from orchard_cli.family import Family

STOP_GRACE_SECONDS = 30.0  # on Ctrl-C, how long running episodes get to wind down
HEARTBEAT_SECONDS = 30.0


def spread_environments(episodes: list[Any], family: "Family",
                        task_of: Callable[[Any], Any] = lambda e: e[0]) -> list[Any]:
    """Episodes round-robin over the family's environments (`env_key`), so that parallel workers
    start on different environments. Within an environment, and for tasks without a key, the
    given order stays."""
    groups: dict[Hashable, list[Any]] = {}
    for item in episodes:
        task = task_of(item)
        try:
            key = family.env_key(task)
        except Exception:  # the episode itself reports why; here it is an environment of its own
            key = None
        groups.setdefault(("task", task.task_id) if key is None else ("env", key), []).append(item)
    if all(k[0] == "task" for k in groups):  # no environments declared: keep the order
        return list(episodes)
    queues = list(groups.values())
    depth = max((len(q) for q in queues), default=0)
    return [q[i] for i in range(depth) for q in queues if i < len(q)]


def reap_orphans(env: Any) -> list[str]:
    """A run resumed after a crash: reap what the crashed run left (sandboxes whose owner or
    client process is gone), here or in the service. Never fails the run."""
    try:
        return env.gc()
    except Exception:  # gc is housekeeping; the run goes on
        return []


def close_family(family: "Family", *, interrupted: bool = False) -> None:
    """The run is over (or stopping): the family stops what it started (builds, services)."""
    try:
        family.close(interrupted=interrupted)
    except Exception:  # housekeeping; never masks the run's own outcome
        pass


class _Heartbeat:
    """A thread that heartbeats every live sandbox until stopped."""

    def __init__(self, env: Any, live: LiveSandboxes, every: float) -> None:
        self.env, self.live, self.every = env, live, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="orchard-heartbeat", daemon=True)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            for sandbox_id in self.live.ids():
                try:
                    self.env.heartbeat(sandbox_id)
                except Exception:  # a sandbox that went meanwhile; its episode reports it
                    pass

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


class _SigtermAsInterrupt:
    """SIGTERM stops the run as Ctrl-C does (main thread only; the old handler comes back)."""

    def __enter__(self) -> "_SigtermAsInterrupt":
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


class Pool:
    """Runs episodes of one family on one Env."""

    def __init__(self, env: Any, family: "Family", *, options: RunOptions, workers: int = 1,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS, board: LiveBoard | None = None) -> None:
        from orchard_cli.seam_v1 import adapt

        self.env, self.family, self.options, self.workers = env, adapt(family), options, max(1, workers)
        self.stopping = threading.Event()
        self.live = LiveSandboxes()
        self.heartbeat_seconds = heartbeat_seconds
        self.board = board if board is not None else current_board()
        """Where running episodes show what they are doing (a command watching the run), or None."""

    def order(self, episodes: list[Episode]) -> list[Episode]:
        """The order episodes are started in (round-robin over environments with > 1 worker)."""
        if self.workers == 1:
            return list(episodes)
        return spread_environments(episodes, self.family, task_of=lambda e: e.task)

    def _one(self, episode: Episode) -> EpisodeResult:
        activity = None
        if self.board is not None:
            activity = self.board.start(episode.episode_id, episode.task.task_id, episode.attempt,
                                        who=getattr(episode.solver, "model", "") or "")
        try:
            return run_episode(episode, family=self.family, env=self.env, options=self.options,
                               stopping=self.stopping, live=self.live, activity=activity)
        except Exception as exc:  # a bug or a disk error in one episode: record it, go on
            return EpisodeResult(task=episode.task, attempt=episode.attempt, episode_id=episode.episode_id,
                                 solver=episode.solver, log_dir=episode.log_dir,
                                 outcome=Outcome(resolved=False, category="infra_error",
                                                 error=f"{type(exc).__name__}: {exc}"))
        finally:
            if self.board is not None:
                self.board.finish(episode.episode_id)

    def run(self, episodes: list[Episode], on_result: Callable[[EpisodeResult], None]) -> None:
        """Run every episode; `on_result` sees each result as it finishes. On Ctrl-C / SIGTERM
        (or an exception from `on_result`) the run stops and the exception goes up."""
        executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="orchard-episode")
        futures: dict[Any, Episode] = {}
        with _SigtermAsInterrupt(), _Heartbeat(self.env, self.live, self.heartbeat_seconds):
            try:
                futures = {executor.submit(self._one, e): e for e in self.order(episodes)}
                for future in as_completed(futures):
                    on_result(future.result())
            except BaseException:
                self.stop(executor, futures)
                raise
            finally:
                close_family(self.family)
            executor.shutdown(wait=True)

    def stop(self, executor: ThreadPoolExecutor, futures: dict[Any, Episode]) -> None:
        """No new sandboxes, queued episodes cancelled, builds interrupted, live sandboxes
        destroyed (their commands fail at once), a short wait for the running episodes."""
        self.stopping.set()
        executor.shutdown(wait=False, cancel_futures=True)
        started = time.monotonic()
        close_family(self.family, interrupted=True)  # builds in progress end, no new reservations
        try:
            self.env.close()  # every sandbox this client made goes, environment builds included
        except Exception:
            pass
        running = [f for f in futures if not f.cancelled()]
        wait(running, timeout=max(0.0, STOP_GRACE_SECONDS - (time.monotonic() - started)))

"""The rollout core's pool on real local sandboxes: every sandbox an episode holds gets heartbeats,
and an episode that crashes in the loop itself becomes an infra_error result, not a dead run."""

from __future__ import annotations

import time

from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import connect
from orchard_cli.rollout.episode import Episode
from orchard_cli.rollout.pool import Pool
from orchard_cli.rollout.solvers import EmptySolver, GoldSolver
from orchard_cli.tasks.calc import CalcEpisode
from orchard_cli.families import load_suite

pytestmark = pytest.mark.bwrap


class CountingEnv:
    """The real Env, with its heartbeats counted per sandbox."""

    def __init__(self, env):
        self.env, self.beats = env, {}

    def heartbeat(self, sandbox_id):
        self.beats[sandbox_id] = self.beats.get(sandbox_id, 0) + 1
        return self.env.heartbeat(sandbox_id)

    def __getattr__(self, name):
        return getattr(self.env, name)


def test_every_held_sandbox_gets_heartbeats():
    family, tasks = load_suite("calc", limit=1)

    class SlowEpisode(CalcEpisode):
        def prepare(self, sandbox):
            super().prepare(sandbox)
            time.sleep(1.5)  # the episode holds its sandbox a while

    family.episode = lambda task, options: SlowEpisode(task, options)
    env = CountingEnv(connect("local"))
    try:
        pool = Pool(env, family, options=RunOptions(), heartbeat_seconds=0.2)
        results = []
        pool.run([Episode(task=tasks[0], attempt=1, solver=GoldSolver(), episode_id="ep-1")], results.append)
    finally:
        env.close()
    assert [r.outcome.category for r in results] == ["resolved"]
    assert env.beats and max(env.beats.values()) >= 3, env.beats  # the grading sandbox, while held
    assert pool.live.ids() == []  # nothing held once the run is over


def test_a_bug_in_an_episode_is_an_infra_error_and_the_run_goes_on():
    family, tasks = load_suite("calc", limit=2)

    class Broken(EmptySolver):
        def solve(self, context):
            if context.task.task_id == tasks[0].task_id:
                raise KeyError("a bug")
            return super().solve(context)

    env = connect("local")
    try:
        results = []
        Pool(env, family, options=RunOptions(), workers=2).run(
            [Episode(task=t, attempt=1, solver=Broken(), episode_id=t.task_id) for t in tasks], results.append)
    finally:
        env.close()
    got = {r.task.task_id: (r.outcome.category, r.outcome.error) for r in results}
    assert got[tasks[0].task_id][0] == "infra_error" and "a bug" in got[tasks[0].task_id][1]
    assert got[tasks[1].task_id] == ("empty_patch", None)

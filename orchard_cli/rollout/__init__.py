"""The rollout core: one loop that pairs a task with a solver in a sandbox, for every kind of run.

    episode.py     run_episode: prepare -> solve -> collect -> grade, for any family and solver
    solvers.py     the Solver seam: gold, empty, a predictions file (and third-party solvers)
    agent.py       AgentSolver: a real harness driving a model through the recording proxy
    pool.py        the one pool: workers, round-robin over environments, heartbeats, Ctrl-C/SIGTERM
    failures.py    EpisodeFailure and the phases that categorise what went wrong
    records.py     the trajectory and the results row of an episode
    eval_run.py    `orchard eval` (and `eval regrade`): the core plus a scorecard sink
    distill_run.py `orchard distill`: the core plus a trajectories sink

The task family seam it calls is declared in `orchard_cli.tasks.base`. This package may import
tasks and harnesses; the env, the proxy and the records never import it.
"""

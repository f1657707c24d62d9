"""The harbor-mini suite built and validated once per test run (its images share one base layer,
orchard/base:bookworm; the tasks run four at a time)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def harbor_mini_validated(tmp_path_factory):
    """{task id: TaskValidation} of every harbor-mini task on the docker backend (gold, null, near miss)."""
    import os

    from orchard_cli.env.images import ensure_base_image
    from orchard_cli.tasks.registry import load_suite
    from orchard_cli.tasks.validate import validate_tasks

    home = tmp_path_factory.mktemp("harbor-home")
    old = os.environ.get("ORCHARD_HOME")
    os.environ["ORCHARD_HOME"] = str(home)
    try:
        ensure_base_image(quiet=True)
        family, tasks = load_suite("harbor-mini")
        return {r.task_id: r for r in validate_tasks(family, tasks, backend="docker", workers=4)}
    finally:
        if old is None:
            os.environ.pop("ORCHARD_HOME", None)
        else:
            os.environ["ORCHARD_HOME"] = old

"""The conformance suite (orchard_cli.env.conformance) against every backend this machine has."""

from __future__ import annotations

import os

import pytest

from orchard_cli.env.conformance import CHECKS, CheckSkipped, skip_reason
from orchard_cli.env.manager import EnvManager

BACKENDS = {
    "local": pytest.mark.bwrap,
    "docker": pytest.mark.docker,
    "kubernetes": pytest.mark.k8s,
}
SLOW = {"pids_limit", "memory_limit", "gc_orphan", "timeout"}


def _spec_kwargs(backend: str) -> dict:
    if backend == "local":
        return {}
    try:
        from orchard_cli.env.images import ensure_base_image
    except ImportError as exc:  # written by another part of the project
        pytest.skip(f"orchard_cli.env.images is not available: {exc}")
    if backend == "docker":
        return {"image": ensure_base_image()}
    return {"image": os.environ.get("ORCHARD_K8S_IMAGE") or ensure_base_image()}


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """One EnvManager per backend for the whole module (kept fast), closed at the end."""
    made: dict[str, tuple[EnvManager, dict]] = {}
    home = tmp_path_factory.mktemp("conformance-home")

    def get(backend: str) -> tuple[EnvManager, dict]:
        if backend not in made:
            spec_kwargs = _spec_kwargs(backend)
            options = {"root": str(home / "local")} if backend == "local" else {}
            made[backend] = (EnvManager(backend, **options), spec_kwargs)
        return made[backend]

    yield get
    for manager, _ in made.values():
        manager.close()


@pytest.mark.parametrize(("backend", "check"), [
    pytest.param(backend, check, marks=[mark, *([pytest.mark.slow] if check in SLOW else [])],
                 id=f"{backend}-{check}")
    for backend, mark in BACKENDS.items() for check in CHECKS
])
def test_conformance(backend, check, envs):
    env, spec_kwargs = envs(backend)
    reason = skip_reason(check, env.backend.unsupported)
    if reason:
        pytest.skip(reason)
    try:
        CHECKS[check](env, spec_kwargs)
    except CheckSkipped as exc:
        pytest.skip(str(exc))
    finally:
        leftovers = env.list_sandboxes()
        for info in leftovers:
            env.delete_sandbox(info.sandbox_id)
    assert not leftovers, f"the check left sandboxes behind: {[i.sandbox_id for i in leftovers]}"
    assert not [r for r in env.backend.resources() if r.owner == env.owner], \
        "backend resources left behind"


def test_every_capability_check_names_a_real_capability():
    from orchard_cli.env.base import CAPABILITIES
    from orchard_cli.env.conformance import NEEDS

    assert set(NEEDS.values()) <= CAPABILITIES
    assert set(NEEDS) <= set(CHECKS)
    assert skip_reason("pids_limit", frozenset({"pids_limit"})) == \
        "backend lists 'pids_limit' as unsupported"
    assert skip_reason("exec", frozenset(CAPABILITIES)) is None

"""Why an episode did not get a verdict on its merits: one failure type and the phases that raise it.

Every exception in a phase of an episode becomes an `EpisodeFailure` whose message names the phase
and the cause. The category follows the cause, not the phase: the sandbox failing is infra_error,
`EnvironmentUnavailable` (or a version-1 family's `environment_error`) is env_error anywhere, anything else takes the phase's category.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from orchard_cli.errors import EnvironmentUnavailable, OrchardError, SandboxError
from orchard_cli.outcome import ERROR_CATEGORIES, EpisodeFailure, Outcome

__all__ = ["EpisodeFailure", "phase", "settle"]


@contextmanager
def phase(category: str, what: str, env_errors: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run one phase of an episode; any exception leaves it as an `EpisodeFailure`."""
    try:
        yield
    except EpisodeFailure:
        raise
    except Exception as exc:
        if isinstance(exc, SandboxError):
            category = "infra_error"
        elif isinstance(exc, EnvironmentUnavailable) or (env_errors and isinstance(exc, env_errors)):
            category = "env_error"
        text = exc.message if isinstance(exc, OrchardError) else f"{type(exc).__name__}: {exc}"
        raise EpisodeFailure(category, f"{what}: {' '.join(str(text).split())}") from exc


def settle(failure: tuple[str, str] | None, outcome: Outcome) -> Outcome:
    """What an unresolved episode counts as when its solver says the model is not to blame
    (`Solution.failure`): infra_error when the model could not be reached, timeout when the agent
    ran out of time. Never 'unresolved' for those."""
    if not failure or outcome.resolved or outcome.category in ERROR_CATEGORIES:
        return outcome
    return outcome.model_copy(update={"category": failure[0], "error": failure[1]})

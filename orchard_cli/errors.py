"""One error hierarchy. `main()` turns any `OrchardError` into one line on stderr plus a hint.

Exit codes (documented in the README):
  0  success
  1  the run completed but did not meet its bar (for example `--fail-under`)
  2  bad usage or bad input (unknown name, malformed file, path escape)
  3  infrastructure or environment failure (service down, backend error, sandbox died)
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BELOW_BAR = 1
EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = 130


class OrchardError(Exception):
    """Base of every error orchard reports to a person. `hint` names the next thing to try."""

    exit_code: int = EXIT_USAGE
    status_code: int = 400  # HTTP status when the error crosses the service boundary

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(OrchardError):
    """Bad input from the user: a flag, a file, a request body."""


class NotFoundError(OrchardError):
    """A named thing (sandbox, job, task, suite) does not exist."""

    status_code = 404


class UnknownNameError(UsageError):
    """A registry lookup failed; the message lists the valid names."""


class MissingDependencyError(OrchardError):
    """An optional dependency is not installed; the hint is the exact install line."""

    exit_code = EXIT_INFRA
    status_code = 501


class InfraError(OrchardError):
    """The environment failed: a backend, the service, a container engine."""

    exit_code = EXIT_INFRA
    status_code = 503


class OverloadedError(InfraError):
    """The service has more work than it takes on right now; try again after `retry_after` s."""

    status_code = 503

    def __init__(self, message: str, *, hint: str | None = None, retry_after: float = 1.0) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class WaitTimeout(InfraError):
    """A server-side wait ran out (HTTP 408); the thing waited for is still on its way."""

    status_code = 408


class EnvironmentUnavailable(InfraError):
    """A task's environment cannot be had (a build, a service that will not start): an episode
    that raises it ends as env_error, never infra_error."""


class SandboxError(InfraError):
    """A sandbox could not be created or stopped working."""


class TooLargeError(UsageError):
    """A request or a file beyond a documented size limit."""

    status_code = 413


class LimitError(UsageError):
    """A number the backend cannot honour (pids above the kernel's pid_max, say): refused before
    anything is made, as HTTP 422."""

    status_code = 422


class PathEscapeError(UsageError):
    """A file path that would leave the sandbox's workspace."""

    status_code = 403


class AuthError(OrchardError):
    """Missing or wrong API key."""

    exit_code = EXIT_USAGE
    status_code = 401


class BelowBarError(OrchardError):
    """The run completed but missed a threshold the user set (`--fail-under`)."""

    exit_code = EXIT_BELOW_BAR

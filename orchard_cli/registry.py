"""Components looked up by short name and imported lazily.

A registry maps `name -> "module:attr"` for orchard's own components, takes more from a decorator,
and from an entry-point group for third-party packages. Nothing is imported until `load(name)`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, TypeVar

from orchard_cli.errors import MissingDependencyError, UnknownNameError

T = TypeVar("T")

# Optional dependencies and the exact line that installs each.
INSTALL_HINTS = {
    "docker": "pip install 'orchard-cli[docker]'",
    "kubernetes": "pip install 'orchard-cli[kubernetes]'",
    "torch": "pip install torch==2.13.0",
    "transformers": "pip install 'orchard-cli[train]'",
    "datasets": "pip install 'orchard-cli[swe]'",
    "swebench": "pip install 'orchard-cli[swe]'",
}


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean claw-mini?)' for a near miss of one of `choices`, else ''."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=2, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str, builtins: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._targets: dict[str, str | Callable[[], T] | T] = dict(builtins or {})
        self._loaded_entry_points = False

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator: `@backends.register("mine")` on a class or factory."""

        def wrap(obj: Any) -> Any:
            self._targets[name] = obj
            return obj

        return wrap

    def _entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True
        for ep in entry_points(group=self.group):
            self._targets.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._entry_points()
        return sorted(self._targets)

    def load(self, name: str) -> Any:
        self._entry_points()
        if name not in self._targets:
            valid = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; valid: {valid}")
        target = self._targets[name]
        if not isinstance(target, str):
            return target
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing in INSTALL_HINTS:
                raise MissingDependencyError(
                    f"{self.kind} {name!r} needs the Python package {missing!r}, which is not installed",
                    hint=INSTALL_HINTS[missing],
                ) from exc
            raise
        obj = getattr(module, attr) if attr else module
        self._targets[name] = obj
        return obj

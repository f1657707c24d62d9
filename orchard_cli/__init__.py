"""orchard: agent trajectory distillation, training and evaluation on reusable sandboxes.

Nothing heavy happens at import time: backends, docker, kubernetes, torch and transformers are
imported only by the code path that needs them.

`orchard_cli.commands`, `.tasks` and `.harnesses` live in the top-level folders `commands/`,
`tasks/` and `harnesses/` of a source checkout; an installed package has them inside it. When this
package is imported straight from a checkout (`python -m pytest` in the repository root, whatever
is installed), the checkout's root joins the package path so those three are found there too.
"""

import os as _os

__version__ = "0.1.0"

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "tasks")) and _os.path.isfile(_os.path.join(_root, "tasks", "registry.py")):
    __path__.append(_root)  # type: ignore[name-defined]  # noqa: F821

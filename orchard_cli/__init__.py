"""orchard: agent trajectory distillation, training and evaluation on reusable sandboxes.

Nothing heavy happens at import time: backends, docker, kubernetes, torch and transformers are
imported only by the code path that needs them.
"""

__version__ = "0.1.0"

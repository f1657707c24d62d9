"""`python stop_at.py STOP ARGS...`: run `orchard ARGS...` with every training step from index STOP
on raising KeyboardInterrupt, as Ctrl-C would (also under torchrun: every process stops there)."""

import sys

from orchard_cli.main import main
from orchard_cli.training.trainer import Trainer

STOP = int(sys.argv[1])
_real = Trainer.run_step


def _run_step(self, index):  # type: ignore[no-untyped-def]
    if index >= STOP:
        raise KeyboardInterrupt
    return _real(self, index)


Trainer.run_step = _run_step  # type: ignore[method-assign]
sys.exit(main(sys.argv[2:]))

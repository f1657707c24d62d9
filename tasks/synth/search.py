"""Running mutants: on several sandboxes at once, with outcomes taken in candidate order.

A candidate's outcome depends only on the mutant and the tests, never on which sandbox ran it or
when, and the caller consumes outcomes strictly in candidate order; so the tasks kept are the same
with one job or several. Work done ahead for a candidate the caller then skips is simply dropped.
"""

from __future__ import annotations

import queue
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Union

from orchard_cli.tasks.synth.mutate import Mutation
from orchard_cli.tasks.synth.tests_run import Baseline, Run, Workbench


@dataclass
class Candidate:
    mutation: Mutation
    original: str
    """The unmutated text of the mutated file."""
    files: list[str] | None
    """Test files to run first; None: the whole suite at once."""


@dataclass
class Keep:
    failing: set[str]
    run: Run
    """The whole-suite run of the mutant (its log feeds the problem statement)."""


Outcome = Union[Keep, str]
"""A Keep, or why the mutant is not kept: survived, too_many_failing, timeout."""


def try_mutant(bench: Workbench, base: Baseline, candidate: Candidate, max_failing: int,
               timeout: float) -> Outcome:
    """With `files`, those test files run first and the whole suite only when 1..max_failing of
    their tests fail; the choice never depends on how fast this machine is."""
    mutation, files = candidate.mutation, candidate.files
    bench.write(mutation.path, mutation.apply(candidate.original))
    try:
        scope = base.reliable if files is None else set().union(*(base.files[f] for f in files))
        run = bench.run(files, timeout=timeout)
        if run.timed_out:
            return "timeout"
        failing = run.failing(scope)
        if files is not None and failing and len(failing) <= max_failing:
            run = bench.run(None, timeout=timeout)
            if run.timed_out:
                return "timeout"
            failing = run.failing(base.reliable)
    finally:
        bench.write(mutation.path, candidate.original)
    if not failing:
        return "survived"
    if len(failing) > max_failing:
        return "too_many_failing"
    return Keep(failing, run)


class Evaluator:
    """Mutants on `benches` (one sandbox each), outcomes yielded in candidate order."""

    def __init__(self, benches: list[Workbench], base: Baseline, max_failing: int,
                 timeout: float) -> None:
        self.benches = benches
        self.base = base
        self.max_failing = max_failing
        self.timeout = timeout

    def _run(self, free: "queue.Queue[Workbench]", candidate: Candidate) -> Outcome:
        bench = free.get()
        try:
            return try_mutant(bench, self.base, candidate, self.max_failing, self.timeout)
        finally:
            free.put(bench)

    def outcomes(self, candidates: list[Candidate],
                 skip: Callable[[Candidate], bool]) -> Iterator[tuple[Candidate, Outcome | None]]:
        """(candidate, outcome) in order; outcome None for those `skip` says to leave (asked
        again when their turn comes, so a skip decided meanwhile still holds)."""
        free: queue.Queue[Workbench] = queue.Queue()
        for bench in self.benches:
            free.put(bench)
        ahead = len(self.benches)
        futures: dict[int, Future] = {}
        with ThreadPoolExecutor(ahead, thread_name_prefix="orchard-synth") as pool:
            try:
                for i, candidate in enumerate(candidates):
                    j = i
                    while len(futures) < ahead and j < len(candidates):
                        if j not in futures and not skip(candidates[j]):
                            futures[j] = pool.submit(self._run, free, candidates[j])
                        j += 1
                    future = futures.pop(i, None)
                    if skip(candidate):
                        if future is not None:
                            future.cancel()
                        yield candidate, None
                    else:
                        outcome = future.result() if future is not None else \
                            self._run(free, candidate)
                        yield candidate, outcome
            finally:
                for future in futures.values():
                    future.cancel()

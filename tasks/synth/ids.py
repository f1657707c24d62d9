"""Which of a package's test ids a task can name in FAIL_TO_PASS / PASS_TO_PASS.

The grader knows a test only by the id the SWE-bench pytest parser reads from the log, in a fresh
sandbox and a fresh process. Two kinds of ids fail there (isodate 0.7.2 has both):

* unreadable: the parser takes the second whitespace-separated word of a `PASSED <id>` line, so
  `test_parse[2014-08-18 14:55:22.123456Z-None-...]` comes back as `test_parse[2014-08-18`
  (and two such ids can come back as one);
* moving: parameter ids that pytest numbers by position (`expected13`) follow the order of their
  source, and the order of a set can change from one process to the next even under a fixed
  PYTHONHASHSEED: whatever hashes by address (None before Python 3.12, classes, functions, plain
  objects) moves with address-space randomization. Two runs agree by chance often enough (about
  1 in 20 for isodate's tests/test_date.py) that comparing two runs cannot be trusted.

`collect_command` lists the collected node ids, exactly, from several fresh processes (a plugin
writes `item.nodeid`s as JSON, so no terminal format is parsed); `IdCheck` says which ids are
unreadable, by the official parser itself, and which files' ids moved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

COLLECTIONS = 8
"""Fresh processes that collect the suite (with the two baseline runs: ten looks at the ids)."""
PLUGIN_DIR = "/tmp/orchard-synth-ids"
PLUGIN_NAME = "orchard_synth_ids"
PLUGIN = '''\
"""orchard tasks synth: the collected node ids, as JSON, to the file $ORCHARD_SYNTH_IDS."""
import json
import os


def pytest_collection_finish(session):
    with open(os.environ["ORCHARD_SYNTH_IDS"], "w") as handle:
        json.dump([item.nodeid for item in session.items], handle)
'''


def ids_file(i: int) -> str:
    return f"{PLUGIN_DIR}/ids-{i}.json"


def collect_command(test_cmd: str, times: int) -> str:
    """The test command made to collect only, `times` times, each in a fresh interpreter."""
    runs = " ".join(str(i) for i in range(times))
    return (f"for i in {runs}; do (export ORCHARD_SYNTH_IDS={PLUGIN_DIR}/ids-$i.json "
            f"PYTHONPATH={PLUGIN_DIR}${{PYTHONPATH:+:$PYTHONPATH}}; {test_cmd} --collect-only -q "
            f"-p {PLUGIN_NAME}); done")


def read_ids(data: bytes | None) -> list[str] | None:
    if data is None:
        return None
    try:
        ids = json.loads(data)
    except ValueError:
        return None
    return [str(i) for i in ids] if isinstance(ids, list) else None


def test_file(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def whole_id(test_id: str) -> bool:
    """Without a list of the collected ids: False for ids the parser cut at a space
    ('test_x[a b]' -> 'test_x[a')."""
    return test_id.count("[") == test_id.count("]")


def _by_file(ids: list[str]) -> dict[str, set[str]]:
    files: dict[str, set[str]] = {}
    for test in ids:
        files.setdefault(test_file(test), set()).add(test)
    return files


def read_back(test_id: str, parser: Callable[[str, Any], dict[str, str]]) -> set[str]:
    """The ids `parser` reads from the lines `pytest -rA` prints for this test."""
    spec = SimpleNamespace(instance_id="synth", repo="synth", version="")
    got: set[str] = set()
    for line in (f"PASSED {test_id}", f"FAILED {test_id} - AssertionError", f"ERROR {test_id}"):
        got |= set(parser(line, spec))
    return got


@dataclass
class IdCheck:
    """What several collections of the suite say about its ids."""

    collected: list[str] | None
    """The ids of the first collection that gave a list; None when none did."""
    unreadable: set[str] = field(default_factory=set)
    """Collected ids the parser does not read back as themselves."""
    ambiguous: set[str] = field(default_factory=set)
    """Readable ids that an unreadable one is also read back as."""
    moving: set[str] = field(default_factory=set)
    """Test files whose ids differ between collections."""
    known: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, lists: list[list[str] | None],
           parser: Callable[[str, Any], dict[str, str]]) -> "IdCheck":
        seen = [ids for ids in lists if ids is not None]
        if not seen:
            return cls(None)
        every = set().union(*seen)
        by_file = [_by_file(ids) for ids in seen]
        moving = {f for f in {test_file(t) for t in every}
                  if any(files.get(f) != by_file[0].get(f) for files in by_file)}
        unreadable, read_as = set(), set()
        for test in every:
            back = read_back(test, parser)
            if back != {test}:
                unreadable.add(test)
                read_as |= back
        ambiguous = read_as & (every - unreadable)
        return cls(list(dict.fromkeys(seen[0])), unreadable, ambiguous, moving,
                   every - unreadable - ambiguous)

    def readable(self, test_id: str) -> bool:
        """Whether a parsed id stands for exactly one collected test."""
        return whole_id(test_id) if self.collected is None else test_id in self.known

    def unreadable_in_first(self) -> int:
        return len(self.unreadable & set(self.collected or ()))

"""The prefix cache of the batching engine: finished requests' KV caches, one per conversation.

A conversation's next turn (an agent's next call) extends the prompt of its last one; the slot
that answered it still holds those tokens' keys and values, so the next turn only processes its
new tokens, whichever other conversations ran in between. Entries are `packed.KVSlot`s; the
least recently used go first past `capacity` tokens (all entries together).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def _common(a: list[int], b: list[int], limit: int) -> int:
    """Length of the common prefix of a and b, at most `limit` (binary search on slice equality)."""
    lo, hi = 0, min(len(a), len(b), limit)
    if hi and a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixCache:
    """KV caches of finished requests, least recently used evicted past `capacity` tokens."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[int, Any] = OrderedDict()
        self.tokens = 0

    def take(self, prompt_ids: list[int]) -> tuple[Any, int]:
        """(a slot holding the longest cached prefix of `prompt_ids`, its length); (None, 0) when
        none. At least one prompt token is left to process (its logits start the reply). A prompt
        that extends a whole entry takes that entry (the conversation goes on in it); else the
        shared part is copied."""
        best, n = None, 0
        limit = len(prompt_ids) - 1
        for key, slot in self.entries.items():
            found = _common(slot.ids, prompt_ids, limit)
            if found > n:
                best, n = key, found
        if best is None:
            return None, 0
        slot = self.entries[best]
        if n == slot.length:
            del self.entries[best]
            self.tokens -= slot.length
            return slot, n
        self.entries.move_to_end(best)
        return slot.copy_prefix(n), n

    def put(self, slot: Any) -> None:
        if slot.length == 0 or self.capacity <= 0:
            return
        for key, other in list(self.entries.items()):  # what this slot extends is superseded
            if other.length <= slot.length and slot.ids[:other.length] == other.ids:
                del self.entries[key]
                self.tokens -= other.length
        slot.shrink()
        self.entries[id(slot)] = slot
        self.tokens += slot.length
        while self.tokens > self.capacity and self.entries:
            _, old = self.entries.popitem(last=False)
            self.tokens -= old.length

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0

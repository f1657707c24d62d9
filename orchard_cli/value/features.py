"""Frozen-LM features of an episode: what the value model's scalar head reads.

The base LM (SmolLM2-135M by default) is never updated; it reads each episode once:

1. the main pass over `problem + trajectory end + patch` (data.compose, at most `max_tokens`):
   the mean hidden state over the patch's tokens at the middle layer, the last token's final
   hidden state, the mean log-probability of the patch tokens and of its added lines;
2. the naturalness passes: each hunk of the patch read as code, once as it was (context and
   removed lines) and once as it would be (context and added lines). The LM's mean
   log-probability of the changed lines in each version, and the difference. A fix tends to
   make code more natural, a wrong edit less (the "naturalness of software" signal);
3. relevance.py, without the LM: whether the patch edits what the problem statement names;
4. actions.py, without the LM, for an episode without a patch (claw): how many tool calls, the
   share that failed, the share that repeat an earlier call exactly, whether and how much the
   service state changed, the answer's length. Such
   an episode's patch features are 0 (has_patch 0) and its Actions section stands where the patch
   would (pooled the same way); a patch episode's action features are 0.

`FEATURE_VERSION` changes whenever the vector's layout or meaning changes: a value model only
reads features of its own version, from the base it was trained on.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from orchard_cli.value.actions import FEATURES as ACTION
from orchard_cli.value.actions import features as action_features
from orchard_cli.value.data import Episode, compose, sections, title
from orchard_cli.value.relevance import NAMES as RELEVANCE
from orchard_cli.value.relevance import relevance

FEATURE_VERSION = 4
SCALARS = ("patch_logprob", "added_logprob_in_context", "after_logprob", "before_logprob",
           "naturalness_gain", "after_min_hunk", "after_snippet_logprob", "before_snippet_logprob",
           "after_min_token", "before_min_token", "min_token_gain",
           "log_patch_tokens", "log_changed_lines", "log_trajectory_tokens", "hunks", "has_patch",
           *RELEVANCE, *ACTION)
# The compact set (the head's default): differences within an episode, sizes and relevance. The
# absolute log-probabilities left out mostly tell code bases apart, not good patches from bad.
COMPACT = ("naturalness_gain", "min_token_gain", "log_changed_lines", "hunks", "has_patch", *RELEVANCE, *ACTION)
SNIPPET_CONTEXT = 3  # context lines around a hunk's changes, each side, in the naturalness passes
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")

_CACHE: dict[str, np.ndarray] = {}  # feature vectors by key, for the life of the process
_SNIPPETS: dict[tuple, tuple[float, int, float, int, float]] = {}  # naturalness passes (near misses share them)


@dataclass
class Hunk:
    before: list[tuple[str, bool]]
    """(line, changed) of the old version: context and removed lines."""
    after: list[tuple[str, bool]]


def hunks(patch: str) -> list[Hunk]:
    """The hunks of a unified diff, each as its old and new line lists (read by the counts in
    each `@@ -a,b +c,d @@` header, so a removed line that starts with '--' is not a header)."""
    out: list[Hunk] = []
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        i += 1
        if not match:
            continue
        old, new = int(match.group(1) or 1), int(match.group(2) or 1)
        hunk = Hunk([], [])
        while i < len(lines) and (old > 0 or new > 0):
            line = lines[i]
            tag, text = line[:1], line[1:]
            if tag == "\\":  # "\ No newline at end of file"
                i += 1
                continue
            if tag == "-":
                hunk.before.append((text, True))
                old -= 1
            elif tag == "+":
                hunk.after.append((text, True))
                new -= 1
            else:
                hunk.before.append((text, False))
                hunk.after.append((text, False))
                old, new = old - 1, new - 1
            i += 1
        if any(c for _, c in hunk.before) or any(c for _, c in hunk.after):
            out.append(hunk)
    return out


def _trim(lines: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The changed lines with SNIPPET_CONTEXT lines of context each side (the hunk may carry more)."""
    marks = [i for i, (_, changed) in enumerate(lines) if changed]
    if not marks:
        return lines
    return lines[max(0, marks[0] - SNIPPET_CONTEXT):marks[-1] + SNIPPET_CONTEXT + 1]


def _snippet(lines: list[tuple[str, bool]]) -> tuple[str, list[tuple[int, int]]]:
    """Joined text and the character spans of its changed lines."""
    text, spans = "", []
    for line, changed in _trim(lines):
        start = len(text)
        text += line + "\n"
        if changed:
            spans.append((start, len(text)))
    return text, spans


def default_precision() -> str:
    """bf16 where the CPU computes it natively (AMX, AVX512-BF16); elsewhere torch emulates it
    and fp32 is several times faster (100 episodes of 256 tokens: 3.7 min fp32, over 10 min bf16,
    on a 2-core machine without either)."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = set(next((line for line in handle if line.startswith("flags")), "").split())
    except OSError:
        return "fp32"
    return "bf16" if flags & {"amx_bf16", "avx512_bf16"} else "fp32"


class Featurizer:
    """Features of episodes with one frozen base LM (a `LocalModel`).

    Each episode is read in one unpadded pass; episodes whose composed texts begin alike (the
    candidates of one task: the same header and problem) share that beginning: it is read once,
    its keys and values kept, and each episode reads only the rest. Causal attention makes the
    states equal to a whole pass (within float rounding: pinned by tests/value/test_features.py).
    """

    def __init__(self, base: Any, *, max_tokens: int = 512, fingerprint: str = "",
                 precision: str = "bf16", spec: str = "", reading: Any = None) -> None:
        from orchard_cli.value.reading import Reading

        self.base = base
        self.spec = spec
        """The base's name or folder (what `load_base` takes): needed to read in worker processes."""
        self.precision = precision
        """'bf16': the passes run under bfloat16 autocast (2-3x faster on CPUs with AMX/AVX512-BF16,
        correct anywhere); 'fp32': full precision. Part of the cache key and of the model's meta."""
        self.reading: Reading = reading if reading is not None else Reading(cache=False)
        self.store = None
        if self.reading.cache and fingerprint:
            from orchard_cli.value.reading import FeatureStore

            self.store = FeatureStore.default()
        self.tokenizer, self.model = base.tokenizer, base.model
        self.max_tokens = max_tokens
        self.fingerprint = fingerprint
        self.layers = int(self.model.config.num_hidden_layers)
        self.mid = self.layers // 2
        self.hidden = int(self.model.config.hidden_size)
        self.computed = 0
        """Episodes read by the LM so far (cache hits not counted)."""
        self._device: Any = None

    @property
    def dim(self) -> int:
        return 2 * self.hidden + len(SCALARS)

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def encode(self, ep: Episode) -> dict[str, Any]:
        """The main pass's ids, the patch's span in them, which patch tokens are on '+' lines,
        and the section sizes before the budget."""
        parts = sections(ep)
        ids = {"header": self._encode(parts["header"])[0]}
        added: list[bool] = []
        for name in ("problem", "trajectory", "patch"):
            text = title(ep, name) + parts[name] + "\n" if parts[name] else ""
            ids[name], offsets = self._encode(text) if text else ([], [])
            if name == "patch" and ep.actions is None:
                plus = [m.span() for m in re.finditer(r"(?m)^\+(?!\+\+ ).*$", text)]
                added = _marks([start for start, _ in offsets], plus)
        seq, span = compose(ids, self.max_tokens)
        return {"ids": seq, "span": span, "added": added[:span[1] - span[0]],
                "patch_tokens": len(ids["patch"]) if ep.actions is None else 0,
                "trajectory_tokens": len(ids["trajectory"])}

    def key(self, ep: Episode) -> str:
        raw = f"{FEATURE_VERSION}\x1f{self.fingerprint}\x1f{self.precision}\x1f{self.max_tokens}\x1f{ep.digest()}"
        return hashlib.sha256(raw.encode()).hexdigest()

    def features(self, episodes: Sequence[Episode], progress: Any = None) -> np.ndarray:
        """One row per episode, cached by content: in this process, and on disk when the reading
        keeps a cache (a second run over the same episodes reads nothing again)."""
        keys = [self.key(ep) for ep in episodes]
        todo: dict[str, Episode] = {}
        for k, ep in zip(keys, episodes):
            if k in _CACHE or k in todo:
                continue
            row = self.store.get(k, self.dim) if self.store is not None else None
            if row is not None:
                _CACHE[k] = row
            else:
                todo[k] = ep
        if todo:
            from orchard_cli.value.reading import resolve_device

            resolve_device(self.reading.device)  # a device torch cannot see: said before any work
            fresh = list(todo)
            if self.reading.workers > 1 and len(fresh) > 1:
                rows = self._in_workers([todo[k] for k in fresh], progress)
            else:
                rows = self.compute([todo[k] for k in fresh], progress)
            for k, row in zip(fresh, rows):
                _CACHE[k] = row
                if self.store is not None:
                    self.store.put(k, row)
        if not episodes:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([_CACHE[k] for k in keys]).astype(np.float32)

    def _in_workers(self, episodes: list[Episode], progress: Any) -> list[np.ndarray]:
        """The episodes cut into chunks at boundaries no prefix is shared over, several per worker."""
        encoded = [self.encode(ep)["ids"] for ep in episodes]
        order = sorted(range(len(episodes)), key=lambda i: encoded[i])
        groups = _segments([encoded[i] for i in order])
        target = max(1, len(episodes) // (4 * self.reading.workers))
        chunks: list[list[int]] = [[]]
        for lo, hi in groups:
            if len(chunks[-1]) >= target:
                chunks.append([])
            chunks[-1].extend(order[lo:hi])
        rows_of = _read_in_workers(self, [[episodes[i] for i in chunk] for chunk in chunks], progress)
        rows: list[Any] = [None] * len(episodes)
        for chunk, chunk_rows in zip(chunks, rows_of):
            for i, row in zip(chunk, chunk_rows):
                rows[i] = row
        self.computed += len(episodes)
        return rows

    # ---- the passes ---------------------------------------------------------------------------

    def compute(self, episodes: Sequence[Episode], progress: Any = None) -> list[np.ndarray]:
        """Feature rows of `episodes` (no cache), in their order."""
        encoded = [self.encode(ep) for ep in episodes]
        order = sorted(range(len(episodes)), key=lambda i: encoded[i]["ids"])
        rows: list[Any] = [None] * len(episodes)
        done = 0
        with _torch_threads(self.reading.torch_threads()):
            for lo, hi, length in shared_prefixes([encoded[i]["ids"] for i in order]):
                members = order[lo:hi]
                prefix = self._pass(encoded[members[0]]["ids"][:length], keep=True) if length else None
                natural = self._naturalness([episodes[i].patch for i in members])
                for j, i in enumerate(members):
                    mid, final = self._states(encoded[i]["ids"], prefix)
                    rows[i] = self._row(episodes[i], encoded[i], mid, final, natural[j])
                    done += 1
                    if progress:
                        progress(done, len(episodes))
        self.computed += len(episodes)
        return rows

    def device(self) -> Any:
        """Where the base computes (moved there once, on first use)."""
        if self._device is None:
            from orchard_cli.value.reading import resolve_device

            self._device = resolve_device(self.reading.device)
        if next(self.model.parameters()).device != self._device:  # the process's one copy of the base
            with self.base.lock:
                self.model.to(self._device)
        return self._device

    def _pass(self, ids: list[int], *, prefix: Any = None, keep: bool = False, hidden: bool = True) -> Any:
        """One pass over `ids` (after `prefix`'s tokens, whose cache it extends and then crops back).
        Returns (length, cache, mid states, final states) when `keep`, else (mid, final)."""
        import torch

        device = self.device()
        feed = torch.tensor([ids], dtype=torch.long, device=device)
        with self.base.lock, torch.inference_mode(), \
                torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            if prefix is None:
                cache = None
                if keep:
                    from transformers import DynamicCache

                    cache = DynamicCache(config=self.model.config)
                out = self.model.model(input_ids=feed, cache=cache, use_cache=keep, output_hidden_states=hidden)
                mid = out.hidden_states[self.mid][0] if hidden else None
                final = out.last_hidden_state[0]
                return (len(ids), cache, mid, final) if keep else (mid, final)
            length, cache, pre_mid, pre_final = prefix
            out = self.model.model(input_ids=feed, cache=cache, use_cache=True, output_hidden_states=True)
            cache.crop(-len(ids))  # back to the prefix (transformers 5: crop(-n) drops the last n)
            assert cache.get_seq_length() == length
            return torch.cat([pre_mid, out.hidden_states[self.mid][0]]), torch.cat([pre_final, out.last_hidden_state[0]])

    def _states(self, ids: list[int], prefix: Any) -> tuple[Any, Any]:
        if prefix is None:
            return self._pass(ids)
        return self._pass(ids[prefix[0]:], prefix=prefix)

    def _logprobs(self, final: Any, ids: list[int], a: int, b: int) -> Any:
        """The log-probability of each token in [a, b) given the tokens before it (the LM head
        runs on those positions only: over a 49k vocabulary it costs as much as the transformer)."""
        import torch

        a = max(a, 1)
        if b <= a:
            return torch.zeros(0)
        with self.base.lock, torch.inference_mode(), \
                torch.autocast(final.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            logits = self.model.lm_head(final[a - 1:b - 1]).float()
            lp = torch.log_softmax(logits, dim=-1)
            target = torch.tensor(ids[a:b], dtype=torch.long, device=final.device)
            return lp.gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()

    def _row(self, ep: Episode, enc: dict[str, Any], mid: Any, final: Any, natural: list[float]) -> np.ndarray:
        ids, (p0, p1) = enc["ids"], enc["span"]
        last = final[len(ids) - 1]
        pooled = mid[p0:p1].mean(0) if p1 > p0 else mid[:len(ids)].mean(0)
        lp = [float(v) for v in self._logprobs(final, ids, p0, p1)]  # tokens max(p0, 1) .. p1 - 1
        first = max(p0, 1)
        on_added = [lp[p0 + j - first] for j, plus in enumerate(enc["added"]) if plus and p0 + j >= first]
        in_patch = lp if ep.actions is None else []  # an Actions section is not a patch
        changed = sum(1 for line in ep.patch.splitlines()
                      if line[:1] in "+-" and not line.startswith(("+++", "---")))
        scalars = [_mean(in_patch), _mean(on_added), *natural,
                   math.log1p(enc["patch_tokens"]), math.log1p(changed), math.log1p(enc["trajectory_tokens"]),
                   float(len(hunks(ep.patch))), float(bool(ep.patch.strip())),
                   *relevance(ep.problem, ep.patch), *action_features(ep.actions)]
        return np.concatenate([pooled.float().cpu().numpy(), last.float().cpu().numpy(),
                               np.asarray(scalars, dtype=np.float32)]).astype(np.float32)

    def _naturalness(self, patches: list[str]) -> list[list[float]]:
        """Per patch: after, before, gain, worst hunk's after, whole-snippet after and before
        (mean log-probabilities; zeros for a patch without hunks). One unpadded pass per snippet
        not read before (near misses share most of theirs)."""
        jobs: list[tuple[int, str, list[int], list[bool]]] = []  # (patch, side, ids, changed)
        for index, patch in enumerate(patches):
            for hunk in hunks(patch):
                for side, lines in (("after", hunk.after), ("before", hunk.before)):
                    text, spans = _snippet(lines)
                    ids, offsets = self._encode(text)
                    ids = ids[:self.max_tokens]
                    changed = _marks([s for s, _ in offsets[:len(ids)]], spans)
                    jobs.append((index, side, ids, changed))
        scores: dict[tuple[int, str], list[tuple[float, int, float, int, float]]] = {}
        keyed = [(self.fingerprint, self.precision, tuple(ids), tuple(changed)) for _, _, ids, changed in jobs]
        for key, (_, _, ids, changed) in zip(keyed, jobs):
            if key in _SNIPPETS or len(ids) < 2:
                continue
            _, final = self._pass(ids, hidden=False)
            values = [float(v) for v in self._logprobs(final, ids, 1, len(ids))]
            picked = [values[k - 1] for k in range(1, len(ids)) if changed[k]]
            _SNIPPETS[key] = (_mean(picked), len(picked), _mean(values), len(values), min(picked, default=0.0))
        for key, (index, side, _, _) in zip(keyed, jobs):
            if key in _SNIPPETS:
                scores.setdefault((index, side), []).append(_SNIPPETS[key])
        return [self._natural_row(scores.get((i, "after"), []), scores.get((i, "before"), []))
                for i in range(len(patches))]

    @staticmethod
    def _natural_row(after: list[tuple[float, int, float, int, float]],
                     before: list[tuple[float, int, float, int, float]]) -> list[float]:
        """after, before, gain (mean log-prob of the changed lines' tokens), the worst hunk's after,
        whole-snippet means, and the single least likely changed token after, before, and gain."""
        if not after and not before:
            return [0.0] * 9

        def pooled(values: list[tuple[float, int]]) -> float | None:
            total = sum(c for _, c in values)
            return sum(v * c for v, c in values) / total if total else None

        a = pooled([(v, c) for v, c, _, _, _ in after])
        b = pooled([(v, c) for v, c, _, _, _ in before])
        a = a if a is not None else (b if b is not None else 0.0)  # pure removal: no gain to read
        b = b if b is not None else a  # pure addition: likewise
        worst = min((v for v, c, _, _, _ in after if c), default=a)
        a_all = pooled([(v, c) for _, _, v, c, _ in after]) or 0.0
        b_all = pooled([(v, c) for _, _, v, c, _ in before]) or 0.0
        a_min = min((m for _, c, _, _, m in after if c), default=None)
        b_min = min((m for _, c, _, _, m in before if c), default=None)
        a_min = a_min if a_min is not None else (b_min if b_min is not None else 0.0)
        b_min = b_min if b_min is not None else a_min
        return [a, b, a - b, worst, a_all, b_all, a_min, b_min, a_min - b_min]


def _marks(starts: list[int], spans: list[tuple[int, int]]) -> list[bool]:
    """Whether each token (by its start offset) falls in one of the sorted, disjoint `spans`."""
    out, k = [], 0
    for start in starts:
        while k < len(spans) and spans[k][1] <= start:
            k += 1
        out.append(k < len(spans) and spans[k][0] <= start < spans[k][1])
    return out


SHARED_LEAST = 32  # tokens: a shorter common beginning is not worth a kept cache


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _segments(seqs: list[list[int]]) -> list[tuple[int, int]]:
    """[lo, hi) runs of the sorted `seqs` whose neighbours share at least SHARED_LEAST tokens."""
    bounds = [0] + [k + 1 for k in range(len(seqs) - 1) if _common(seqs[k], seqs[k + 1]) < SHARED_LEAST]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:] + [len(seqs)])] if seqs else []


def shared_prefixes(seqs: list[list[int]]) -> list[tuple[int, int, int]]:
    """Cover the sorted `seqs` with runs (lo, hi, length): seqs[lo:hi] share their first `length`
    tokens (0: read alone), each member keeping at least one token of its own. Within a segment
    the run that saves the most tokens is taken first, then the parts either side of it."""
    out: list[tuple[int, int, int]] = []

    def split(lo: int, hi: int, lcp: list[int]) -> None:
        best = (0, lo, lo, 0)
        for k in range(lo, hi - 1):
            a, b = k, k + 1
            while a > lo and lcp[a - 1] >= lcp[k]:
                a -= 1
            while b < hi - 1 and lcp[b] >= lcp[k]:
                b += 1
            length = min(lcp[k], min(len(seqs[t]) for t in range(a, b + 1)) - 1)
            if length * (b - a) > best[0] and length >= SHARED_LEAST:
                best = (length * (b - a), a, b + 1, length)
        if not best[0]:
            out.extend((t, t + 1, 0) for t in range(lo, hi))
            return
        _, a, b, length = best
        split(lo, a, lcp)
        out.append((a, b, length))
        split(b, hi, lcp)

    lcp = [_common(seqs[k], seqs[k + 1]) for k in range(len(seqs) - 1)]
    for lo, hi in _segments(seqs):
        for start in range(lo, hi, 64):  # the search is cubic in the run: cut long ones
            split(start, min(hi, start + 64), lcp)
    return out


class _torch_threads:
    """torch's intra-op threads set for a block, and put back after it."""

    def __init__(self, n: int) -> None:
        self.n, self.before = n, 0

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        if self.n != self.before:
            torch.set_num_threads(self.n)

    def __exit__(self, *_: Any) -> None:
        import torch

        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)


# ---- worker processes ----------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _start_worker(spec: str, settings: dict[str, Any]) -> None:
    from orchard_cli.models.local_model import load_model
    from orchard_cli.value.reading import Reading

    reading = Reading.model_validate(settings["reading"])
    threads = reading.torch_threads()
    base = load_model(spec, threads=threads)
    _WORKER["featurizer"] = Featurizer(base, spec=spec, max_tokens=settings["max_tokens"],
                                       fingerprint=settings["fingerprint"], precision=settings["precision"],
                                       reading=reading.model_copy(update={"workers": 1, "cache": False,
                                                                          "threads": threads}))


def _read_chunk(episodes: list[dict[str, Any]]) -> list[np.ndarray]:
    return _WORKER["featurizer"].compute([Episode.model_validate(e) for e in episodes])


def _read_in_workers(featurizer: Featurizer, chunks: Sequence[Sequence[Episode]], progress: Any) -> list[list[np.ndarray]]:
    """Each chunk read by one of `featurizer.reading.workers` processes (spawned: each loads the
    base once, with the cores shared among them); rows in chunk order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from orchard_cli.errors import UsageError

    if not featurizer.spec:
        raise UsageError("reading with --workers needs the base model's name or folder")
    settings = {"reading": featurizer.reading.model_dump(), "max_tokens": featurizer.max_tokens,
                "fingerprint": featurizer.fingerprint, "precision": featurizer.precision}
    total, done = sum(len(c) for c in chunks), 0
    results: list[list[np.ndarray] | None] = [None] * len(chunks)
    pool = ProcessPoolExecutor(max_workers=featurizer.reading.workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(featurizer.spec, settings))
    try:
        futures = {pool.submit(_read_chunk, [e.model_dump(mode="json") for e in chunk]): i
                   for i, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done += len(chunks[futures[future]])
            if progress:
                progress(done, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a failed chunk: the queued ones are not read
    return [r or [] for r in results]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def clear_cache() -> None:
    _CACHE.clear()
    _SNIPPETS.clear()

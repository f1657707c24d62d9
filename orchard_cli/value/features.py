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
BATCH = 4
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
    """Features of episodes with one frozen base LM (a `LocalModel`)."""

    def __init__(self, base: Any, *, max_tokens: int = 512, fingerprint: str = "",
                 precision: str = "bf16") -> None:
        self.base = base
        self.precision = precision
        """'bf16': the passes run under bfloat16 autocast (2-3x faster on CPUs with AMX/AVX512-BF16,
        correct anywhere); 'fp32': full precision. Part of the cache key and of the model's meta."""
        self.tokenizer, self.model = base.tokenizer, base.model
        self.max_tokens = max_tokens
        self.fingerprint = fingerprint
        self.layers = int(self.model.config.num_hidden_layers)
        self.mid = self.layers // 2
        self.hidden = int(self.model.config.hidden_size)
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.computed = 0
        """Episodes read by the LM so far (cache hits not counted)."""

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
                added = [any(a <= start < b for a, b in plus) for start, _ in offsets]
        seq, span = compose(ids, self.max_tokens)
        return {"ids": seq, "span": span, "added": added[:span[1] - span[0]],
                "patch_tokens": len(ids["patch"]) if ep.actions is None else 0,
                "trajectory_tokens": len(ids["trajectory"])}

    def key(self, ep: Episode) -> str:
        raw = f"{FEATURE_VERSION}\x1f{self.fingerprint}\x1f{self.precision}\x1f{self.max_tokens}\x1f{ep.digest()}"
        return hashlib.sha256(raw.encode()).hexdigest()

    def features(self, episodes: Sequence[Episode], progress: Any = None) -> np.ndarray:
        """One row per episode (cached by content: the same text is read once per process)."""
        keys = [self.key(ep) for ep in episodes]
        todo: dict[str, Episode] = {}
        for k, ep in zip(keys, episodes):
            if k not in _CACHE:
                todo.setdefault(k, ep)
        order = sorted(todo, key=lambda k: len(todo[k].output) + len(todo[k].trajectory))
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            for k, row in zip(chunk, self._compute([todo[k] for k in chunk])):
                _CACHE[k] = row
            self.computed += len(chunk)
            if progress:
                progress(min(start + BATCH, len(order)), len(order))
        if not episodes:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([_CACHE[k] for k in keys]).astype(np.float32)

    # ---- the passes ---------------------------------------------------------------------------

    def _forward(self, batch: list[list[int]], spans: list[tuple[int, int]], hidden: bool) -> tuple[list[Any], Any]:
        """Right-padded pass over `batch`. Returns, per row, the log-probability of each token in
        its span [a, b) given the tokens before it (the LM head runs on those positions only:
        over a 49k vocabulary it costs as much as the transformer), and the hidden states."""
        import torch

        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, :len(ids)] = 1
        with self.base.lock, torch.inference_mode(), \
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            out = self.model.model(input_ids=input_ids, attention_mask=mask, output_hidden_states=hidden)
            last = out.last_hidden_state
            token_lp = []
            for row, (a, b) in enumerate(spans):
                a = max(a, 1)
                if b <= a:
                    token_lp.append(torch.zeros(0))
                    continue
                logits = self.model.lm_head(last[row, a - 1:b - 1]).float()
                lp = torch.log_softmax(logits, dim=-1)
                token_lp.append(lp.gather(-1, input_ids[row, a:b].unsqueeze(-1)).squeeze(-1))
        return token_lp, (out.hidden_states if hidden else None)

    def _compute(self, episodes: list[Episode]) -> list[np.ndarray]:
        encoded = [self.encode(ep) for ep in episodes]
        token_lp, states = self._forward([e["ids"] for e in encoded], [e["span"] for e in encoded], hidden=True)
        natural = self._naturalness([ep.patch for ep in episodes])
        rows = []
        for row, (ep, enc) in enumerate(zip(episodes, encoded)):
            ids, (p0, p1) = enc["ids"], enc["span"]
            mid = states[self.mid][row]
            last = states[-1][row, len(ids) - 1]
            pooled = mid[p0:p1].mean(0) if p1 > p0 else mid[:len(ids)].mean(0)
            lp = [float(v) for v in token_lp[row]]  # tokens max(p0, 1) .. p1 - 1
            first = max(p0, 1)
            on_added = [lp[p0 + j - first] for j, plus in enumerate(enc["added"]) if plus and p0 + j >= first]
            in_patch = lp if ep.actions is None else []  # an Actions section is not a patch
            changed = sum(1 for line in ep.patch.splitlines()
                          if line[:1] in "+-" and not line.startswith(("+++", "---")))
            scalars = [_mean(in_patch), _mean(on_added), *natural[row],
                       math.log1p(enc["patch_tokens"]), math.log1p(changed), math.log1p(enc["trajectory_tokens"]),
                       float(len(hunks(ep.patch))), float(bool(ep.patch.strip())),
                       *relevance(ep.problem, ep.patch), *action_features(ep.actions)]
            rows.append(np.concatenate([pooled.float().numpy(), last.float().numpy(),
                                        np.asarray(scalars, dtype=np.float32)]))
        return rows

    def _naturalness(self, patches: list[str]) -> list[list[float]]:
        """Per patch: after, before, gain, worst hunk's after, whole-snippet after and before
        (mean log-probabilities; zeros for a patch without hunks). One batched pass for all."""
        jobs: list[tuple[int, str, list[int], list[bool]]] = []  # (patch, side, ids, changed)
        for index, patch in enumerate(patches):
            for hunk in hunks(patch):
                for side, lines in (("after", hunk.after), ("before", hunk.before)):
                    text, spans = _snippet(lines)
                    ids, offsets = self._encode(text)
                    ids = ids[:self.max_tokens]
                    changed = [any(a <= s < b for a, b in spans) for s, _ in offsets[:len(ids)]]
                    jobs.append((index, side, ids, changed))
        scores: dict[tuple[int, str], list[tuple[float, int, float, int, float]]] = {}
        keyed = [(self.fingerprint, self.precision, tuple(ids), tuple(changed)) for _, _, ids, changed in jobs]
        fresh = {key: (ids, changed) for key, (_, _, ids, changed) in zip(keyed, jobs)
                 if key not in _SNIPPETS and len(ids) >= 2}
        runnable = sorted(fresh, key=lambda key: len(key[2]))
        for start in range(0, len(runnable), 2 * BATCH):
            chunk = runnable[start:start + 2 * BATCH]
            lp, _ = self._forward([list(key[2]) for key in chunk], [(1, len(key[2])) for key in chunk],
                                  hidden=False)
            for row, key in enumerate(chunk):
                ids, changed = fresh[key]
                values = [float(v) for v in lp[row]]
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


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def clear_cache() -> None:
    _CACHE.clear()
    _SNIPPETS.clear()

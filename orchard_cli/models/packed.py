"""One forward pass over many sequences at once: their new tokens packed into one row.

The continuous-batching engine (`models.batching`) runs every decoding sequence's next token and
the prompt chunks of the sequences joining, together, through the model's own modules: the
projections and the MLP see one [tokens, hidden] matrix (a matrix-matrix product, where one
sequence alone is a matrix-vector product bound by memory bandwidth), and attention runs per
sequence over that sequence's own KV cache (a `KVSlot`), so no sequence is padded or masked
against another and each keeps its own positions.

    runner = PackedRunner.for_model(model.model)     # None: not a supported architecture
    logits = runner.forward([(slot_a, [5]), (slot_b, [7, 8, 9])], want=[True, True])

Supported: decoder-only transformers laid out as Llama is in transformers (`model.model.layers[i]`
with `input_layernorm`, `self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp`; rotary
embeddings; no sliding window, no per-head norms): Llama, SmolLM2, Qwen2 (biases included). Other
models are served one request at a time (`LocalModel.steps`). The arithmetic is the model's own
modules' arithmetic; `tests/models/test_batching.py` compares it with the model's forward.
"""

from __future__ import annotations

import sys
from typing import Any

SUPPORTED = ("llama", "qwen2")
GROW = 256  # a slot's capacity grows by at least this many tokens (and by half of itself)


class KVSlot:
    """One sequence's keys and values, all layers, in one buffer [layers, 2, kv_heads, capacity, head_dim].

    `length` tokens are held; `ids` are the token ids they were computed from (what a prefix cache
    matches against)."""

    def __init__(self, runner: PackedRunner, capacity: int) -> None:
        self.runner = runner
        self.buffer = runner.torch.empty(runner.layers, 2, runner.kv_heads, max(capacity, 1), runner.head_dim,
                                         dtype=runner.dtype, device=runner.device)
        self.length = 0
        self.ids: list[int] = []

    @property
    def capacity(self) -> int:
        return int(self.buffer.shape[3])

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def reserve(self, total: int) -> None:
        """Room for `total` tokens (keeping what is held)."""
        if total <= self.capacity:
            return
        grown = max(total, self.capacity + max(GROW, self.capacity // 2))
        bigger = self.runner.torch.empty(*self.buffer.shape[:3], grown, self.buffer.shape[4],
                                         dtype=self.buffer.dtype, device=self.buffer.device)
        bigger[:, :, :, :self.length] = self.buffer[:, :, :, :self.length]
        self.buffer = bigger

    def copy_prefix(self, n: int) -> KVSlot:
        """A new slot holding this one's first `n` tokens (room for more)."""
        other = KVSlot(self.runner, n + GROW)
        other.buffer[:, :, :, :n] = self.buffer[:, :, :, :n]
        other.length, other.ids = n, list(self.ids[:n])
        return other

    def crop(self, n: int) -> None:
        """Keep the first `n` tokens."""
        self.length, self.ids = min(n, self.length), self.ids[:n]

    def shrink(self) -> None:
        """Give back the capacity beyond what is held (before the slot is kept in a cache)."""
        if self.capacity > self.length + 16:
            self.buffer = self.buffer[:, :, :, :max(self.length, 1)].clone()


class PackedRunner:
    """The packed forward pass of one model (see the module's docstring)."""

    def __init__(self, causal_lm: Any) -> None:
        import torch

        self.torch = torch
        self.lm = causal_lm
        self.base = causal_lm.model
        config = causal_lm.config
        first = self.base.layers[0].self_attn
        self.layers = len(self.base.layers)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(first, "head_dim", None) or config.hidden_size // self.heads)
        self.scaling = float(getattr(first, "scaling", self.head_dim ** -0.5))
        self.rotary = sys.modules[type(first).__module__].apply_rotary_pos_emb
        parameter = next(causal_lm.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device

    @classmethod
    def for_model(cls, causal_lm: Any) -> PackedRunner | None:
        """A runner, or None when the model is not laid out as this forward expects."""
        reason = unsupported(causal_lm)
        return None if reason else cls(causal_lm)

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.torch.finfo(self.dtype).bits // 8

    def slot(self, capacity: int) -> KVSlot:
        return KVSlot(self, capacity)

    def forward(self, feeds: list[tuple[KVSlot, list[int]]], want: list[bool]) -> Any:
        """Run the new tokens of every (slot, ids) pair; each slot then holds them too. Returns the
        logits [k, vocab] (fp32) of the last new token of each pair whose `want` is true, in order."""
        torch = self.torch
        ids, positions, spans = [], [], []
        for slot, new in feeds:
            slot.reserve(slot.length + len(new))
            spans.append((len(ids), len(ids) + len(new), slot.length))
            ids.extend(new)
            positions.extend(range(slot.length, slot.length + len(new)))
        total = len(ids)
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        position_ids = torch.tensor([positions], dtype=torch.long, device=self.device)
        hidden = self.base.embed_tokens(input_ids)
        cos, sin = self.base.rotary_emb(hidden, position_ids=position_ids)
        for index, layer in enumerate(self.base.layers):
            attn = layer.self_attn
            residual = hidden
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(1, total, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(1, total, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, total, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self.rotary(q, k, cos, sin)
            outs = []
            for (slot, _), (a, b, past) in zip(feeds, spans):
                keys, values = slot.buffer[index, 0], slot.buffer[index, 1]
                keys[:, past:past + b - a] = k[0, :, a:b]
                values[:, past:past + b - a] = v[0, :, a:b]
                outs.append(self._attend(q[:, :, a:b], keys[:, :past + b - a].unsqueeze(0),
                                         values[:, :past + b - a].unsqueeze(0), past))
            attended = torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
            attended = attended.transpose(1, 2).reshape(1, total, self.heads * self.head_dim)
            hidden = residual + attn.o_proj(attended)
            residual = hidden
            hidden = residual + layer.mlp(layer.post_attention_layernorm(hidden))
        for (slot, new), _ in zip(feeds, spans):
            slot.length += len(new)
            slot.ids.extend(new)
        rows = [b - 1 for (a, b, _), keep in zip(spans, want) if keep]
        if not rows:
            return torch.empty(0, 0)
        last = self.base.norm(hidden[0, rows])
        return self.lm.lm_head(last).float()

    def _attend(self, q: Any, keys: Any, values: Any, past: int) -> Any:
        torch = self.torch
        n = q.shape[2]
        mask = None
        if n > 1:  # a prompt chunk: token i sees the `past` tokens and the chunk's first i + 1
            mask = torch.ones(n, past + n, dtype=torch.bool, device=q.device).tril(diagonal=past)
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                                                enable_gqa=self.kv_heads != self.heads)


def unsupported(causal_lm: Any) -> str | None:
    """Why `PackedRunner` cannot run this model (None: it can)."""
    config = getattr(causal_lm, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED:
        return f"architecture {kind!r} (batched: {', '.join(SUPPORTED)})"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "a sliding attention window"
    base = getattr(causal_lm, "model", None)
    layers = getattr(base, "layers", None)
    if base is None or not layers or not all(hasattr(base, a) for a in ("embed_tokens", "rotary_emb", "norm")):
        return "an unexpected module layout"
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or hasattr(attn, "q_norm") or not all(
                hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return "an unexpected attention layout"
        if not all(hasattr(layer, a) for a in ("input_layernorm", "post_attention_layernorm", "mlp")):
            return "an unexpected layer layout"
    if not hasattr(sys.modules.get(type(layers[0].self_attn).__module__), "apply_rotary_pos_emb"):
        return "no rotary embedding function"
    return None

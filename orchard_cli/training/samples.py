"""Episodes -> training samples: token ids and labels, the loss on assistant tokens only.

Rendering. A turn's prompt is rendered the way the model will be served: with the base model's own
chat template when that template renders tools (`tools` / `tool_calls` appear in it), otherwise
with orchard's tool-call format (`orchard_cli.models.toolcall.render_messages`, which `orchard
serve` uses to build its prompts) inside the model's chat template. The prompt is the template
with its generation prompt, tokenized on its own, exactly as the server does; the answer is the
rest of the rendered conversation up to the end of the assistant turn (its end-of-turn token
included, the template's whitespace after it not), tokenized on its own. Only answer tokens carry
loss (`labels` is -100 elsewhere): no system, user or tool token ever does.

Recorded token ids. When a call recorded `prompt_token_ids` and `completion_token_ids` (vLLM's
`return_token_ids`, or `orchard serve`), the sample is made of those ids instead, so the model
trains on exactly the tokens it saw and produced, provided they are the base model's tokens: the
recorded prompt must decode to the prompt rendered here. Otherwise (another tokenizer, another
template) the turn is rendered, and counted as `token_ids_rejected`. A completion that stopped
(finish reason stop / tool_calls) without its end-of-turn token gets it appended, so the model
learns to stop.

Builders. `per-call`: one sample per turn. `merged`: consecutive turns of one episode become one
sample with several trained answers, as long as the next turn's prompt ids start with the
previous sample's ids exactly (the model saw that very sequence as context); a turn that does not
extend it starts a new sample and is counted in `merge_breaks`. A causal model gives each token the
same loss in both, so merging trains on the same answers while processing fewer tokens.

Length policy (`max_seq_len`): a merged sample is closed before a turn would make it longer than
`max_seq_len` (counted in `length_breaks`); the turn then starts a sample of its own. A sample still
longer than `max_seq_len` keeps its first `max_seq_len` tokens (the system prompt, the task and the
first turns, as the model saw them; counted in `truncated`) and is dropped when no answer token
remains (`dropped_too_long`). Prompts are never cut in the middle.

Vision-language models (`training.vision.VisionEncoder`, the same builder with another `Encoder`):
a prompt's images become image tokens and a sample's `vision` (its image inputs, computed again at
collate time); a sample whose cut would lose image tokens is dropped instead of truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchard_cli.training.turns import Episode, Turn

IGNORE = -100
Builder = Literal["per-call", "merged"]
TokenIds = Literal["auto", "never"]


@dataclass
class Sample:
    input_ids: list[int]
    labels: list[int]
    episode_id: str
    turns: int = 1
    vision: Any = None
    """A vision-language prompt's images (`training.vision.VisionInputs`), or None."""
    last_turn: Turn | None = None
    """The last turn the sample holds: its prompt and answer are the sample's conversation."""

    @property
    def trainable(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


class SampleStats(BaseModel):
    """What building the samples did; written to the run's summary and model card."""

    model_config = ConfigDict(extra="forbid")

    builder: Builder
    max_seq_len: int
    episodes: int = 0
    turns: int = 0
    samples: int = 0
    tokens: int = 0
    """Tokens the model processes per epoch (prompt and answer)."""
    trainable_tokens: int = 0
    """Tokens that carry loss (assistant answers)."""
    masked_share: float = 0.0
    """Share of tokens without loss."""
    merge_breaks: int = 0
    length_breaks: int = 0
    truncated: int = 0
    dropped_too_long: int = 0
    template_mismatch: int = 0
    """Turns skipped because the template does not render the prompt as a prefix of the answer."""
    token_ids_used: int = 0
    token_ids_rejected: int = 0
    end_of_turn_appended: int = 0
    format: str = ""
    """'template' (the model's own tool format) or 'orchard-toolcall'."""
    images: int = 0
    """Images the samples show (a vision-language base model)."""


def template_renders_tools(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        template = " ".join(template.values())
    return "tool_calls" in template and "tools" in template


@dataclass
class Encoder:
    """Renders turns and tokenizes them like the serving side does."""

    tokenizer: Any
    native_tools: bool = False
    special_ids: set[int] = field(default_factory=set)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> "Encoder":
        return cls(tokenizer, template_renders_tools(tokenizer), set(tokenizer.all_special_ids))

    @property
    def format(self) -> str:
        return "template" if self.native_tools else "orchard-toolcall"

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any,
               generation_prompt: bool) -> str:
        if self.native_tools:
            offered = tools if tools and tool_choice != "none" else None
            return self.tokenizer.apply_chat_template(messages, tools=offered, tokenize=False,
                                                      add_generation_prompt=generation_prompt)
        from orchard_cli.models.toolcall import render_messages

        plain = render_messages(messages, tools, tool_choice)
        return self.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompt(self, text: str, turn: Turn, images: Path | None) -> tuple[list[int], Any]:
        """(ids, image inputs) of a rendered prompt; a text model's have no images. `images`: the
        folder the episode's image references resolve against."""
        return self.encode(text), None

    def turn(self, turn: Turn, stats: SampleStats, use_ids: bool,
             images: Path | None = None) -> tuple[list[int], list[int], Any] | None:
        """(prompt ids, answer ids, image inputs) of a turn; None when the template cannot render
        it as one."""
        prompt_text = self.render(turn.prompt, turn.tools, turn.tool_choice, True)
        full = self.render(turn.prompt + [turn.answer], turn.tools, turn.tool_choice, False)
        if not full.startswith(prompt_text) or not full[len(prompt_text):].strip():
            stats.template_mismatch += 1
            return None
        answer_ids = self.encode(full[len(prompt_text):].rstrip())
        if use_ids and turn.prompt_ids and turn.completion_ids:
            recorded = self._recorded(turn, prompt_text, answer_ids, stats)
            if recorded is not None:
                return (*recorded, None)
        prompt_ids, vision = self.encode_prompt(prompt_text, turn, images)
        return prompt_ids, answer_ids, vision

    def _recorded(self, turn: Turn, prompt_text: str, answer_ids: list[int],
                  stats: SampleStats) -> tuple[list[int], list[int]] | None:
        prompt_ids, completion = list(turn.prompt_ids or ()), list(turn.completion_ids or ())
        size = len(self.tokenizer)
        if any(not 0 <= i < size for i in prompt_ids + completion) or \
                self.tokenizer.decode(prompt_ids, skip_special_tokens=False) != prompt_text:
            stats.token_ids_rejected += 1
            return None
        stats.token_ids_used += 1
        end = answer_ids[-1] if answer_ids and answer_ids[-1] in self.special_ids else None
        if end is not None and turn.finish_reason in ("stop", "tool_calls") and completion[-1:] != [end]:
            completion.append(end)
            stats.end_of_turn_appended += 1
        return prompt_ids, completion


def _fit(sample: Sample, max_len: int, stats: SampleStats) -> Sample | None:
    if len(sample.input_ids) <= max_len:
        return sample
    sample.input_ids, sample.labels = sample.input_ids[:max_len], sample.labels[:max_len]
    if not sample.trainable or sample.vision is not None and not sample.vision.intact(sample.input_ids):
        stats.dropped_too_long += 1
        return None
    stats.truncated += 1
    return sample


def _episode_samples(episode: Episode, encoder: Encoder, builder: Builder, max_len: int,
                     use_ids: bool, stats: SampleStats) -> list[Sample]:
    episode_id = episode.trajectory.episode_id
    out: list[Sample] = []
    current: Sample | None = None

    def close() -> None:
        nonlocal current
        if current is not None:
            fitted = _fit(current, max_len, stats)
            if fitted is not None:
                out.append(fitted)
        current = None

    for turn in episode.turns:
        encoded = encoder.turn(turn, stats, use_ids, episode.images)
        if encoded is None:
            continue
        stats.turns += 1
        prompt, answer, vision = encoded
        if builder == "merged" and current is not None:
            size = len(current.input_ids)
            if prompt[:size] == current.input_ids and len(prompt) + len(answer) <= max_len:
                current.labels += [IGNORE] * (len(prompt) - size) + answer
                current.input_ids = prompt + answer
                current.turns += 1
                current.vision = vision  # the longer prompt shows the earlier images and its own
                current.last_turn = turn
                continue
            if prompt[:size] == current.input_ids:
                stats.length_breaks += 1
            else:
                stats.merge_breaks += 1
        close()
        current = Sample(prompt + answer, [IGNORE] * len(prompt) + answer, episode_id, vision=vision, last_turn=turn)
    close()
    return out


def build_samples(episodes: list[Episode], tokenizer: Any, *, builder: Builder = "per-call",
                  max_seq_len: int = 2048, token_ids: TokenIds = "auto") -> tuple[list[Sample], SampleStats]:
    """Samples of every episode, in episode order, and what building them did. `tokenizer`: the
    base model's tokenizer, or an `Encoder` (a vision-language model's: `training.vision`)."""
    encoder = tokenizer if isinstance(tokenizer, Encoder) else Encoder.for_tokenizer(tokenizer)
    stats = SampleStats(builder=builder, max_seq_len=max_seq_len, format=encoder.format)
    samples: list[Sample] = []
    for episode in episodes:
        made = _episode_samples(episode, encoder, builder, max_seq_len, token_ids == "auto", stats)
        stats.episodes += bool(made)
        samples += made
    stats.samples = len(samples)
    stats.tokens = sum(len(s.input_ids) for s in samples)
    stats.trainable_tokens = sum(s.trainable for s in samples)
    stats.masked_share = round(1 - stats.trainable_tokens / stats.tokens, 4) if stats.tokens else 0.0
    stats.images = sum(s.vision.count for s in samples if s.vision is not None)
    return samples, stats

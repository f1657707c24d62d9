"""Vision-language students: the sample builder's `Encoder` for a model with a processor.

`orchard train --model DIR` with a vision-language checkpoint (`models.vision_model`) builds its
samples with `VisionEncoder` through the one builder (`samples.build_samples`): the same turns, the
same merging, length policy and assistant-only labels. What differs is how a turn's prompt is made:

- Rendering: the processor's chat template, every message's content as a list of text/image parts
  (`VisionPrompts.render`), through orchard's tool-call format unless the template renders tools
  itself (as for text models).
- Images: each `image_url` part of the prompt (an `orchard-image:` reference, resolved in the
  trajectory file's `.images/` folder, or a data URL) is read; the processor expands its
  placeholder into the model's image tokens. The answer (the assistant's text) is tokenized on its
  own, as for text models, and alone carries loss.
- Recorded token ids are used for text-only turns only (a prompt with images is always rendered:
  recorded ids cannot tell which image their image tokens showed).
- A sample keeps its images as `VisionInputs` (the prompt text and image sources); the pixel values
  are computed again when a micro-batch is made (`merge_inputs`), so a run over many screenshots
  does not hold every image's pixels in memory.

A text-only trajectory on a vision-language base trains like any other (no image inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.models.vision_model import VisionPrompts, chat_parts, image_urls, read_image
from orchard_cli.training.turns import Turn
from orchard_cli.training.samples import Encoder, SampleStats, template_renders_tools

# Image inputs with a batch axis in front of the image axis (Idefics3/SmolVLM): key -> ndim.
_BATCHED = {"pixel_values": 5, "pixel_attention_mask": 4}


@dataclass
class VisionInputs:
    """The images of one sample's prompt, processed again when a batch needs them."""

    prompts: VisionPrompts
    text: str
    urls: list[str]
    folder: Path | None
    image_tokens: int

    @property
    def count(self) -> int:
        return len(self.urls)

    def intact(self, ids: list[int]) -> bool:
        """Whether `ids` (a truncated sample) still holds every image token of the prompt."""
        token = self.prompts.image_token_id
        return token is not None and ids.count(token) == self.image_tokens

    def tensors(self) -> dict[str, Any]:
        """The processor's image inputs (pixel_values, ...) for this prompt."""
        _, inputs = self.prompts.process(self.text, [read_image(u, self.folder) for u in self.urls])
        return inputs


@dataclass
class VisionEncoder(Encoder):
    """Renders turns with a processor's chat template and images (see the module docstring)."""

    prompts: Any = None

    @classmethod
    def for_processor(cls, processor: Any) -> "VisionEncoder":
        tokenizer = processor.tokenizer
        return cls(tokenizer, template_renders_tools(processor), set(tokenizer.all_special_ids),
                   VisionPrompts(processor))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any,
               generation_prompt: bool) -> str:
        return self.prompts.render(messages, tools, tool_choice, generation_prompt, native=self.native_tools)[0]

    def encode_prompt(self, text: str, turn: Turn, images: Path | None) -> tuple[list[int], Any]:
        _, urls = chat_parts(turn.prompt, turn.tools, turn.tool_choice, native=self.native_tools)
        if not urls:
            return self.encode(text), None
        ids, _ = self.prompts.process(text, [read_image(u, images) for u in urls])
        token = self.prompts.image_token_id
        return ids, VisionInputs(self.prompts, text, urls, images, ids.count(token) if token is not None else 0)

    def turn(self, turn: Turn, stats: SampleStats, use_ids: bool,
             images: Path | None = None) -> tuple[list[int], list[int], Any] | None:
        return super().turn(turn, stats, use_ids and not image_urls(turn.prompt), images)


def sample_encoder(base: Any) -> Encoder:
    """The sample builder's Encoder for a loaded base model (`model_loading.LoadedModel`)."""
    if base.processor is not None:
        return VisionEncoder.for_processor(base.processor)
    return Encoder.for_tokenizer(base.tokenizer)


def merge_inputs(parts: list[dict[str, Any]], device: Any) -> dict[str, Any]:
    """The image inputs of several prompts as one batch's, in order (the model matches image
    features to image tokens in that order). Idefics3-style tensors (batch, images, ...) join on
    the image axis, zero-padded to the largest frame (the pixel mask marks the padding); others
    (LLaVA's images, Qwen2-VL's patches and grids) join on their first axis."""
    import torch
    import torch.nn.functional as F

    out: dict[str, Any] = {}
    for key in parts[0]:
        tensors = [p[key] for p in parts if key in p]
        if _BATCHED.get(key) == tensors[0].ndim:
            height = max(t.shape[-2] for t in tensors)
            width = max(t.shape[-1] for t in tensors)
            tensors = [_pad(F, t, height, width) for t in tensors]
            out[key] = torch.cat(tensors, dim=1).to(device)
        else:
            out[key] = torch.cat(tensors, dim=0).to(device)
    return out


def _pad(F: Any, tensor: Any, height: int, width: int) -> Any:
    """A frame (or its mask) zero-padded at the bottom and right to height x width."""
    if tuple(tensor.shape[-2:]) == (height, width):
        return tensor
    room = (0, width - tensor.shape[-1], 0, height - tensor.shape[-2])
    return F.pad(tensor.float(), room).to(tensor.dtype)  # float: bool masks cannot be padded as they are

"""Vision-language checkpoints: what tells one apart, how it loads, how a chat with images becomes
its prompt. Training (`orchard_cli.training.vision`) and serving (`local_chat.ChatJob`) both
render through `VisionPrompts`, so a student is trained on the prompts it will be served.

    is_vision_language(DIR)                     # config.json has a `vision_config`
    model, processor = load_vision(DIR)         # AutoModelForImageTextToText + AutoProcessor, fp32
    prompts = VisionPrompts(processor)
    ids, inputs = prompts.encode(messages, tools, tool_choice)   # inputs: pixel_values, ...

Rendering. Chat messages (content a string or OpenAI parts) go through orchard's tool-call format
(`toolcall.render_messages`, as the text models' prompts do) or, with `native=True`, to the
template as they are; either way every content becomes a list of parts (`{"type": "text"}`,
`{"type": "image"}`) as vision-language chat templates expect, and the image parts' URLs are
returned in the order the template shows them. The processor then expands each image into its
image tokens and computes the pixel values.

Images are read from data URLs (`data:image/png;base64,...`) and, given the folder of a trajectory
file, from its `orchard-image:<sha256>.<ext>` references (orchard_cli.images). Anything else (an
http URL, a file id, bytes that are not an image) is a UsageError: at serve time a 400.

Tested on Idefics3 (SmolVLM's architecture); other processors that take `text=` and `images=`
(LLaVA, Qwen2-VL) follow the same path. Needs pillow; never torchvision (transformers falls back to
its PIL image processors).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from pathlib import Path
from typing import Any

from orchard_cli.errors import InfraError, MissingDependencyError, UsageError

INSTALL = "pip install 'orchard-cli[model]' pillow"
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)
_MARK = re.compile("\x00orchard-image-(\\d+)\x00")
# Input keys of a processor's output that are not the image inputs a forward pass takes.
TEXT_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})


def is_vision_language(folder: str | Path) -> bool:
    """Whether a checkpoint folder holds a vision-language model: its config.json has a
    `vision_config` (Idefics3/SmolVLM, LLaVA, Qwen2-VL, Gemma 3, PaliGemma all do). Reads one
    small file; imports nothing heavy."""
    path = Path(folder).expanduser() / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("vision_config"), dict)


def load_vision(folder: str | Path) -> tuple[Any, Any]:
    """A vision-language checkpoint folder -> a fresh fp32 (model, processor)."""
    import importlib.util

    try:
        if importlib.util.find_spec("PIL") is None:  # the image processors read images with it
            raise ModuleNotFoundError(name="pillow")
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor
        from transformers.utils import logging as hf_logging
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(f"a vision-language model needs {exc.name}, which is not installed",
                                     hint=INSTALL) from exc
    hf_logging.disable_progress_bar()  # stderr is for orchard's own lines
    folder = Path(folder).expanduser()
    try:
        processor = AutoProcessor.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"{folder} is a vision-language checkpoint without a usable processor "
                         f"({_first_line(exc)})",
                         hint="save the processor with the model: processor.save_pretrained(DIR)") from None
    if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise UsageError(f"{folder}: the processor has no image processor or no tokenizer",
                         hint="save the model's own processor with processor.save_pretrained(DIR)")
    try:
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise InfraError(f"cannot load the vision-language model from {folder}: {_first_line(exc)}") from exc
    tokenizer = processor.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, processor


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# ---- messages -> parts ---------------------------------------------------------------------------

def _url(part: dict[str, Any]) -> str | None:
    """The URL of an image content part (chat `image_url`, Responses `input_image`), else None."""
    if part.get("type") not in ("image_url", "input_image"):
        return None
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    return url if isinstance(url, str) else ""


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """Every image part's URL in a conversation, in order."""
    return [u for m in messages if isinstance(m.get("content"), list)
            for p in m["content"] if isinstance(p, dict) and (u := _url(p)) is not None]


def _marked(messages: list[dict[str, Any]], urls: list[str]) -> list[dict[str, Any]]:
    """Messages with each image part replaced by a text mark naming its index in `urls`."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                url = _url(part) if isinstance(part, dict) else None
                if url is None:
                    parts.append(part)
                else:
                    parts.append({"type": "text", "text": f"\x00orchard-image-{len(urls)}\x00"})
                    urls.append(url)
            message = {**message, "content": parts}
        out.append(message)
    return out


def _parts(text: Any, urls: list[str], order: list[str]) -> list[dict[str, Any]]:
    """A rendered content string -> parts, each mark an image part (its URL appended to `order`)."""
    if isinstance(text, list):  # native: parts already, text parts may hold marks
        text = "".join(p.get("text") or "" for p in text if isinstance(p, dict))
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(_MARK.split(text or "")):
        if i % 2:
            parts.append({"type": "image"})
            order.append(urls[int(piece)])
        elif piece:
            parts.append({"type": "text", "text": piece})
    return parts or [{"type": "text", "text": ""}]


def chat_parts(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
               *, native: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """(messages whose content is a list of text/image parts, the image URLs in that order).

    `native`: the messages go to the template as they are (tool calls and tool messages included:
    the template renders the tools); otherwise through orchard's tool-call format first."""
    urls: list[str] = []
    marked = _marked(messages, urls)
    order: list[str] = []
    if native:
        return [{**m, "content": _parts(m.get("content"), urls, order)} for m in marked], order
    from orchard_cli.models.toolcall import render_messages

    plain = render_messages(marked, tools, tool_choice)
    return [{"role": m["role"], "content": _parts(m["content"], urls, order)} for m in plain], order


# ---- images ----------------------------------------------------------------------------------------

def read_image(url: str, folder: str | Path | None = None) -> Any:
    """An image part's URL -> an RGB PIL image: a data URL, or (given the trajectory file's images
    folder) an `orchard-image:` reference. Anything else is a one-line UsageError."""
    from orchard_cli.images import PREFIX, path_of

    if url.startswith(PREFIX):
        if folder is None:
            raise UsageError(f"image {url[:80]}: an orchard-image reference is only read from a trajectory "
                             f"file's images folder", hint="send the image as a data URL (data:image/png;base64,...)")
        path = path_of(url, folder)
        if path is None:
            raise UsageError(f"image {url[:80]!r} is not a valid orchard-image reference")
        try:
            data = path.read_bytes()
        except OSError:
            raise UsageError(f"image {url} is missing from {folder}",
                             hint="copy the .images folder along with its trajectories file") from None
    else:
        match = _DATA_URL.match(url)
        if match is None:
            raise UsageError(f"image {url[:60]!r} is not a data URL (remote images are not fetched)",
                             hint="send images as data:image/png;base64,...")
        try:
            data = base64.b64decode("".join(url[match.end():].split()), validate=True)
        except (binascii.Error, ValueError):
            raise UsageError("an image data URL holds invalid base64") from None
    return decode_image(data, url[:60])


def decode_image(data: bytes, name: str = "image") -> Any:
    try:
        from PIL import Image, UnidentifiedImageError
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("reading images needs pillow, which is not installed", hint=INSTALL) from exc
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise UsageError(f"{name!r} is not a readable image ({_first_line(exc)})") from None


# ---- prompts ---------------------------------------------------------------------------------------

class VisionPrompts:
    """A processor's way of turning a chat with images into token ids and image inputs."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        token_id = getattr(processor, "image_token_id", None)
        if token_id is None and getattr(processor, "image_token", None):
            token_id = self.tokenizer.convert_tokens_to_ids(processor.image_token)
        self.image_token_id: int | None = token_id if isinstance(token_id, int) else None

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: Any,
               generation_prompt: bool, *, native: bool = False) -> tuple[str, list[str]]:
        """(the chat template's text, with one image placeholder per image; the image URLs in order)."""
        parts, urls = chat_parts(messages, tools, tool_choice, native=native)
        offered = tools if native and tools and tool_choice != "none" else None
        try:
            text = self.processor.apply_chat_template(parts, tools=offered, tokenize=False,
                                                      add_generation_prompt=generation_prompt)
        except Exception as exc:  # a template error (jinja's own types) on this conversation
            raise UsageError(f"the chat template cannot render this conversation: {_first_line(exc)}") from None
        return text, urls

    def process(self, text: str, images: list[Any]) -> tuple[list[int], dict[str, Any]]:
        """(token ids, image inputs as tensors) of a rendered prompt and its images."""
        if not images:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]), {}
        try:
            out = self.processor(text=text, images=images, add_special_tokens=False, return_tensors="pt")
        except ValueError as exc:  # e.g. the placeholders and the images disagree
            raise UsageError(f"the processor refused the prompt and its {len(images)} image(s): "
                             f"{_first_line(exc)}") from None
        ids = [int(i) for i in out["input_ids"][0]]
        return ids, {k: v for k, v in out.items() if k not in TEXT_KEYS and k not in ("rows", "cols")}

    def encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               tool_choice: Any = None, prefix: str = "") -> tuple[list[int], dict[str, Any]]:
        """A chat request (image parts as data URLs) -> (prompt ids, image inputs), orchard's
        tool-call format, the generation prompt and `prefix` included: what `orchard serve` feeds."""
        text, urls = self.render(messages, tools, tool_choice, True)
        images = [read_image(u) for u in urls]
        return self.process(text + prefix, images)

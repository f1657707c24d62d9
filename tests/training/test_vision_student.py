"""Vision-language students: a tiny random Idefics3 (SmolVLM's architecture) and its processor,
built here (no hub), trained by `orchard train` on a screenshot trajectory written the way distill
writes them (images as files in `.images/`), then served by `orchard serve`'s server to the
official openai client with an image part."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from model_fixtures import require_model
from orchard_cli.main import main
from orchard_cli.proxy.calls import CallRecord, CallTiming
from orchard_cli.records import JsonlWriter
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome
from orchard_cli.training.synthetic import synthetic_trajectory

IGNORE = -100
IMAGE_SEQ_LEN = 4  # (image_size / patch_size)^2 / scale_factor^2 = (32 / 8)^2 / 2^2
# The chat template SmolVLM's checkpoints ship (content always a list of text/image parts).
TEMPLATE = ("<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
            "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
            "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
            "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
            "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
           "<global-img>"]
CLICK = {"type": "function", "function": {"name": "click", "description": "Click at a point of the page.",
                                          "parameters": {"type": "object", "required": ["x", "y"], "properties": {
                                              "x": {"type": "integer"}, "y": {"type": "integer"}}}}}


def _png(color: tuple[int, int, int], size: tuple[int, int] = (48, 32)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (250, 250, 250))
    ImageDraw.Draw(image).rectangle((8, 8, 30, 20), fill=color)  # a button
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory) -> Path:
    """A checkpoint folder: a random Idefics3 with a 1-layer vision tower and text model, and its
    processor (a byte-level BPE tokenizer trained here, the PIL image processor, SmolVLM's template)."""
    require_model("torch", "transformers", "PIL")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessorPil,
                              Idefics3Processor, PreTrainedTokenizerFast)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["User: Log in as alice. Assistant: I will click the login button.", "<tool_call> click x y",
              "System: You operate a web browser.", "ls -la; grep -rn limit; python -m pytest -q"] * 5
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
                                        pad_token="<|endoftext|>")
    images = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": 32},
                                       max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=IMAGE_SEQ_LEN,
                                  chat_template=TEMPLATE)
    config = Idefics3Config(
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": len(tokenizer),
                     "max_position_embeddings": 1024, "pad_token_id": tokenizer.pad_token_id,
                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id},
        scale_factor=2, image_token_id=processor.image_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-idefics3")
    Idefics3ForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _call(seq: int, messages: list[dict[str, Any]], answer: dict[str, Any], finish: str) -> CallRecord:
    response = {"id": f"c{seq}", "object": "chat.completion", "created": 0, "model": "teacher",
                "choices": [{"index": 0, "message": answer, "finish_reason": finish}]}
    return CallRecord(id=f"c{seq}", episode="web-1", seq=seq, endpoint="chat", upstream_endpoint="chat",
                      model="teacher", status=200, request={"model": "teacher", "messages": messages, "tools": [CLICK]},
                      response=response, timing=CallTiming(started_at=1.7e9 + seq, ended_ms=50.0))


def screen_trajectory() -> Trajectory:
    """A browser episode of two calls, each showing the model a new screenshot."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You operate a web browser."},
        {"role": "user", "content": [{"type": "text", "text": "Log in as alice."},
                                     {"type": "image_url", "image_url": {"url": _url(_png((0, 90, 200)))}}]}]
    click = {"role": "assistant", "content": "I will click the login button.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "click", "arguments": '{"x": 19, "y": 14}'}}]}
    first = _call(0, [dict(m) for m in messages], click, "tool_calls")
    messages += [click, {"role": "tool", "tool_call_id": "call_1", "content": "clicked"},
                 {"role": "user", "content": [{"type": "text", "text": "The page now:"},
                                              {"type": "image_url", "image_url": {"url": _url(_png((0, 160, 60)))}}]}]
    done = {"role": "assistant", "content": "Logged in as alice."}
    second = _call(1, [dict(m) for m in messages], done, "stop")
    return Trajectory(episode_id="web-1", task_id="web__login-1", suite="web-demo", family="web", harness="browser",
                      model="teacher", problem_statement="Log in as alice.", calls=[first, second],
                      messages=[*messages, done], tools=[CLICK],
                      outcome=TrajectoryOutcome(resolved=True, category="resolved", reward=1.0))


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> Path:
    """trajectories.jsonl (the screen episode and a text-only one) written as distill writes it."""
    path = tmp_path_factory.mktemp("data") / "trajectories.jsonl"
    with JsonlWriter(path, images=True) as writer:
        writer.write(screen_trajectory())
        writer.write(synthetic_trajectory(7, calls=2))
    return path


@pytest.fixture(scope="module")
def student(tiny_vlm: Path, screens: Path, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """`orchard train` (the CLI) on the tiny model for 2 steps: (its folder, its JSON summary)."""
    out = tmp_path_factory.mktemp("student") / "model"
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout):
        mp.setenv("ORCHARD_HOME", str(tmp_path_factory.mktemp("home")))
        code = main(["train", "-t", str(screens), "--model", str(tiny_vlm), "--out", str(out), "--max-steps", "2",
                     "--lr", "1e-3", "--threads", "1", "--no-packing", "--format", "json"])
    assert code == 0, stdout.getvalue()
    return out, json.loads(stdout.getvalue())


def test_screenshots_are_files_and_only_assistant_tokens_are_labelled(tiny_vlm, screens):
    from orchard_cli.images import images_dir
    from orchard_cli.models.vision_model import is_vision_language, load_vision
    from orchard_cli.training.turns import load_episodes
    from orchard_cli.training.samples import build_samples
    from orchard_cli.training.vision import VisionEncoder

    assert "orchard-image:" in screens.read_text() and "base64," not in screens.read_text()
    assert len(list(images_dir(screens).iterdir())) == 2
    assert is_vision_language(tiny_vlm) and not is_vision_language(screens.parent)
    _, processor = load_vision(tiny_vlm)
    tokenizer = processor.tokenizer
    image_id = processor.image_token_id
    episodes, _ = load_episodes([screens])
    samples, stats = build_samples(episodes, VisionEncoder.for_processor(processor))
    assert (stats.samples, stats.images, stats.template_mismatch) == (4, 3, 0)  # 1 + 2 screenshots, 2 text turns
    answers = ["I will click the login button.", "Logged in as alice."]
    for sample in samples:
        trained = [i for i, label in enumerate(sample.labels) if label != IGNORE]
        assert trained == list(range(trained[0], len(sample.input_ids)))  # one span, at the end
        assert [sample.labels[i] for i in trained] == sample.input_ids[trained[0]:]
        prompt = tokenizer.decode(sample.input_ids[:trained[0]], skip_special_tokens=False)
        answer = tokenizer.decode(sample.input_ids[trained[0]:], skip_special_tokens=False)
        assert prompt.endswith("Assistant:") and answer.endswith("<end_of_utterance>")
        assert "User:" not in answer and "<image>" not in answer and "System:" not in answer
        images = sample.vision.count if sample.vision is not None else 0
        assert sample.input_ids.count(image_id) == IMAGE_SEQ_LEN * images
        if sample.episode_id == "web-1":
            assert images == 1 + answers.index(next(a for a in answers if a in answer))
            assert sample.vision.tensors()["pixel_values"].shape[:2] == (1, images)
        else:
            assert sample.vision is None and "[image]" not in prompt


def test_orchard_train_a_vision_language_student(student, tiny_vlm, screens, tmp_path):
    import torch
    from safetensors.torch import load_file

    from orchard_cli.models.vision_model import is_vision_language, load_vision

    out, summary = student
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert summary["samples"]["images"] == 3 and summary["samples"]["format"] == "orchard-toolcall"
    assert math.isfinite(summary["first_loss"]) and math.isfinite(summary["final_loss"])
    for name in ("config.json", "model.safetensors", "processor_config.json", "chat_template.jinja",
                 "tokenizer.json", "training_log.jsonl", "orchard_train.json"):
        assert (out / name).is_file(), name
    assert is_vision_language(out)
    model, processor = load_vision(out)  # the checkpoint loads as a whole vision-language model
    assert type(model).__name__ == "Idefics3ForConditionalGeneration" and processor.image_token_id is not None
    before, after = load_file(str(tiny_vlm / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it learned something

    # ... and trains again (text-only data on a vision-language base)
    text_only = tmp_path / "text.jsonl"
    with JsonlWriter(text_only) as writer:
        writer.write(synthetic_trajectory(8, calls=2))
    again = tmp_path / "again"
    assert main(["train", "-t", str(text_only), "--model", str(out), "--out", str(again), "--max-steps", "1",
                 "--threads", "1"]) == 0
    assert (again / "processor_config.json").is_file()


def test_a_missing_screenshot_is_one_line_and_exit_2(tiny_vlm, screens, tmp_path, capsys):
    import shutil

    from orchard_cli.images import images_dir

    copy = tmp_path / "copy.jsonl"
    shutil.copy(screens, copy)
    shutil.copytree(images_dir(screens), images_dir(copy))
    next(images_dir(copy).iterdir()).unlink()
    assert main(["train", "-t", str(copy), "--model", str(tiny_vlm), "--out", str(tmp_path / "o"),
                 "--max-steps", "1", "--threads", "1"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "missing from" in errors[0], errors


def test_orchard_serve_answers_an_image_request(student):
    import openai

    from orchard_cli.models.local_server import LocalEndpoint

    out, _ = student
    endpoint = LocalEndpoint(str(out), cache=False)
    info = endpoint.start()
    try:
        client = openai.OpenAI(base_url=info.base_url, api_key="unused", max_retries=0, timeout=60)
        shot = [{"type": "text", "text": "What is on the screen?"},
                {"type": "image_url", "image_url": {"url": _url(_png((200, 30, 30)))}}]
        reply = client.chat.completions.create(model=info.model, messages=[{"role": "user", "content": shot}],
                                               max_tokens=6, extra_body={"return_token_ids": True})
        choice = reply.choices[0]
        assert choice.finish_reason in ("stop", "length") and isinstance(choice.message.content, str)
        image_id = endpoint.load().vision.image_token_id
        assert reply.model_extra["prompt_token_ids"].count(image_id) == IMAGE_SEQ_LEN  # the image was seen

        text = client.chat.completions.create(model=info.model, max_tokens=4,
                                              messages=[{"role": "user", "content": "Hello"}])
        assert text.choices[0].finish_reason in ("stop", "length")

        broken = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"no").decode()}}]
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model=info.model, messages=[{"role": "user", "content": broken}])
        message = bad.value.body["message"]
        assert bad.value.status_code == 400 and "not a readable image" in message and "\n" not in message
    finally:
        endpoint.stop()

"""The learner under several processes (torchrun's layout, gloo on the CPU): two processes, each
with half of the step's micro-batches, sharded with FSDP2 (`full`, the default) or replicated
(`none`, DDP), end the step with the same weights as one process. The model is the tiny Llama
the tests make (SmolLM2's tokenizer): the arithmetic is what is checked."""

from __future__ import annotations

import os
import socket

import pytest

pytestmark = [pytest.mark.model, pytest.mark.slow]


def rollouts(tokenizer):
    from orchard_cli.rl.samples import PolicyCall, Rollout, assign_advantages, segments_of

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    group = []
    for k, (country, answer, reward) in enumerate([("France", "Paris", 1.0), ("France", "Lyon", 0.0),
                                                   ("Japan", "Tokyo", 1.0), ("Japan", "The capital is Osaka", 0.0)]):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Capital of {country}?"}],
                                               add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [end]
        calls = [PolicyCall(prompt_ids=prompt_ids, completion_ids=ids, logprobs=[0.0] * len(ids))]
        group.append(Rollout(episode_id=f"e{k}", uid="g", suite="s", task_id="t", attempt=k + 1, policy="p",
                             harness="chat", category="resolved", resolved=bool(reward), reward=reward,
                             reward_kind="resolved", calls=calls, segments=segments_of(calls)))
    assign_advantages(group)
    return group


def step(folder: str, rank: int, world: int, out: str, shard: str = "auto") -> None:
    import torch

    from orchard_cli.models.local_model import load_weights
    from orchard_cli.rl.learner import Learner, LearnerConfig
    from orchard_cli.training.trainer import Dist

    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model, tokenizer, _ = load_weights(folder)
    # rows of 128 tokens hold two samples each, one row per micro-batch: each process gets one
    learner = Learner(model, LearnerConfig(lr=1e-5, rows_per_micro_batch=1, max_seq_len=128, threads=1, shard=shard),
                      pad_id=tokenizer.pad_token_id or 0, dist=Dist(world, rank, rank))
    assert learner.parallel.mode == ("none" if world == 1 else "full" if shard == "auto" else shard)
    stats = learner.update(rollouts(tokenizer))
    weights = learner.full_state()  # gathered from the shards (every process takes part)
    if rank == 0:
        torch.save({"weights": {n: t.clone() for n, t in weights.items()}, "loss": stats.loss,
                    "clipped": stats.clipped}, out)
    if world > 1:
        torch.distributed.destroy_process_group()


def _worker(rank: int, folder: str, out: str, shard: str) -> None:
    step(folder, rank, 2, out, shard)


@pytest.fixture(scope="module")
def one_process(tiny_dir, tmp_path_factory):
    import torch

    out = tmp_path_factory.mktemp("one") / "one.pt"
    step(str(tiny_dir), 0, 1, str(out))
    return torch.load(out)


@pytest.mark.parametrize("shard", ["auto", "none"])
def test_two_processes_end_the_step_with_one_process_weights(tiny_dir, one_process, tmp_path, shard) -> None:
    import torch
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(_worker, args=(str(tiny_dir), str(tmp_path / "two.pt"), shard), nprocs=2, join=True)
    one, two = one_process, torch.load(tmp_path / "two.pt")
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    from orchard_cli.models.local_model import load_weights

    before = dict(load_weights(str(tiny_dir))[0].named_parameters())
    moved = 0
    for name, weight in one["weights"].items():
        assert torch.allclose(weight, two["weights"][name], atol=1e-6), name
        moved += not torch.equal(weight, before[name].detach())
    assert moved == len(one["weights"])  # the step did update every weight, the same way in both layouts

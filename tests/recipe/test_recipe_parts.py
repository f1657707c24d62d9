"""The recipe's parts that need no model: refusals before any stage runs, which stages a changed
setting re-runs, the printed command lines (each one parses as the real command), content keys,
the shuffled control, McNemar's exact test."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.recipe import lines
from orchard_cli.recipe.config import RecipeConfig, SynthPart
from orchard_cli.recipe.context import Ctx
from orchard_cli.recipe.run import run_stage, stages
from orchard_cli.recipe.state import RunFolder
from orchard_cli.recipe.stats import mcnemar_exact


@pytest.mark.parametrize("argv, words", [
    (["recipe", "nope"], "nope"),
    (["recipe", "claw", "--harness", "openclaw"], "26 KB"),
    (["recipe", "claw", "--teacher", "big-model"], "--teacher-base-url"),
    (["recipe", "claw", "--templates", "mail-search,nope"], "no claw template named nope"),
    (["recipe", "claw", "--attempts", "3"], "greedy"),
    (["recipe", "web", "--exclude-templates", "shop-cart", "--templates", "shop-cart"], "leave no template"),
])
def test_bad_configuration_is_one_line_and_exit_2_before_any_stage(tmp_path, capsys, argv, words):
    out = tmp_path / "run"
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and words in err, err
    assert len([line for line in err.splitlines() if line.strip()]) <= 2
    assert not out.exists()


def _ctx(tmp_path: Path, **changes) -> Ctx:
    config = RecipeConfig(family="claw", out=str(tmp_path / "run"), **{"control": {"shuffled": True}, **changes})
    folder = RunFolder(tmp_path / "run")
    folder.write_config(config)
    return Ctx(config=config, folder=folder, say=lambda line: None)


def _run_all(ctx: Ctx, ran: list[str]) -> None:
    """Every stage of the recipe with a body that only notes it ran (and what it read)."""
    for name, _ in stages(ctx.config):
        def body(ctx, record, continuing, name=name):
            ran.append(name + (" (continuing)" if continuing else ""))
            record.outputs = f"{name}:{ctx.config.train.lr}:{ctx.config.eval.max_turns}" \
                if name in ("student", "control") else name
            if name == "synth":
                record.result = {"digests": {"train": "t", "heldout": "h"}}
        run_stage(ctx, name, body)


def test_a_changed_setting_reruns_the_stages_it_reaches(tmp_path):
    ran: list[str] = []
    _run_all(_ctx(tmp_path), ran)
    assert ran == ["synth", "distill", "student", "control", "eval-teacher", "eval-base", "eval-student",
                   "eval-control"]
    ran.clear()
    _run_all(_ctx(tmp_path), ran)
    assert ran == []
    _run_all(_ctx(tmp_path, train={"lr": 1e-4}), ran)  # the two trained models, and their evals
    assert ran == ["student", "control", "eval-student", "eval-control"]
    ran.clear()
    _run_all(_ctx(tmp_path, train={"lr": 1e-4}, eval={"max_turns": 5}), ran)
    assert ran == ["eval-teacher", "eval-base", "eval-student", "eval-control"]


def test_an_interrupted_stage_is_continued(tmp_path):
    ctx = _ctx(tmp_path)

    def broken(ctx, record, continuing):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stage(ctx, "synth", broken)
    assert ctx.folder.record("synth").status == "running"
    ran: list[str] = []
    _run_all(ctx, ran)
    assert ran[0] == "synth (continuing)"


def _parses(line: str, capsys) -> None:
    """The printed line is a valid invocation of the real command: every option exists (click
    parses the whole line before it answers --help)."""
    argv = shlex.split(line.removesuffix(" &"))
    assert argv[0] == "orchard"
    code = main([*argv[1:], "--help"])
    captured = capsys.readouterr()
    assert code == 0, f"{line}\n{captured.err}"


def test_printed_command_lines_are_real_commands(tmp_path, capsys):
    from orchard_cli.rl.loop import RLConfig
    from orchard_cli.rl.rollouts import Sampling
    from orchard_cli.rollout.agent import EpisodeOptions
    from orchard_cli.rollout.distill_run import DistillConfig
    from orchard_cli.rollout.eval_run import EvalConfig
    from orchard_cli.tasks.base import TaskSelection
    from orchard_cli.training.config import TrainConfig

    suite, out = str(tmp_path / "tasks"), str(tmp_path / "x")
    printed = [
        lines.synth("claw", 40, 11, ["mail-search", "mail-lookup"], suite, 2),
        lines.distill(DistillConfig(suite=suite, family="claw", base_url="gold", harness="bash", workers=2, out=out,
                                    options=EpisodeOptions(timeout_seconds=150, max_turns=4))),
        lines.train(TrainConfig(trajectories=[out], base_model="smollm2", out=out, builder="merged", max_steps=48,
                                lr=5e-5, packing=False, eval_suite=suite, lora=True, merge=True)),
        lines.serve("smollm2", 23456, 128, 0.0, 1, "cuda"),
        lines.evaluate(EvalConfig(suite=suite, family="claw", model="student", base_url="http://127.0.0.1:23456/v1",
                                  harness="bash", max_turns=4, timeout=150, max_errors=40, out=out)),
        lines.rl(RLConfig(selection=TaskSelection(suite=suite, family="claw"), model=out, out=out, harness="bash",
                          eval_selection=TaskSelection(suite=suite, family="claw", limit=10), eval_every=3,
                          sampling=Sampling(max_new_tokens=128), shuffle_rewards=True,
                          options=EpisodeOptions(timeout_seconds=150, max_turns=4))),
    ]
    for line in printed:
        _parses(line, capsys)
    assert "--no-packing" in printed[2] and "--max-steps 48" in printed[2]
    assert printed[3].endswith(" &") and "--max-new-tokens 128" in printed[3]


def test_held_out_sets_are_disjoint_from_training_by_content(tmp_path):
    from orchard_cli.tasks.base import Task
    from orchard_cli.tasks.claw.synth import synthesize
    from orchard_cli.tasks.content import content_key, overlap

    def task(record: dict, task_id: str | None = None) -> Task:
        return Task(task_id=task_id or record["id"], suite="s", family="claw", problem_statement=record["prompt"],
                    record=record)

    a, b = synthesize("mail-triage", 11000), synthesize("mail-triage", 11001)
    assert a["prompt"] == b["prompt"] and content_key(task(a)) != content_key(task(b))  # same words, other mail
    twin = task(a, "renamed-1")
    assert content_key(twin) == content_key(task(a))
    assert overlap([twin, task(b)], [task(a)]) == {"renamed-1": "mail-triage-11000"}


def test_the_shuffled_control_keeps_each_task_and_takes_another_tasks_turns(tmp_path):
    from orchard_cli.recipe.control import shuffle_demonstrations
    from orchard_cli.records import JsonlWriter
    from orchard_cli.trajectory import Trajectory, read_trajectories

    def demo(i: int, template: str) -> Trajectory:
        task_id = f"{template}-{i}"
        messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"task {task_id}"},
                    {"role": "assistant", "content": f"answer for {task_id}"}]
        call = {"id": f"c{i}", "episode": task_id, "seq": 0, "endpoint": "chat", "status": 200,
                "request": {"messages": messages[:2]}, "response": {"choices": [{"message": messages[2]}]},
                "timing": {"started_at": 0, "first_byte_ms": 1, "ended_ms": 1}}
        return Trajectory.model_validate({"episode_id": task_id, "task_id": task_id, "suite": "s", "harness": "bash",
                                          "model": "gold", "calls": [call], "messages": messages,
                                          "outcome": {"resolved": True, "category": "resolved"}})

    source = tmp_path / "demos.jsonl"
    with JsonlWriter(source) as writer:
        for i in range(4):
            writer.write(demo(i, "mail-search"))
        writer.write(demo(9, "mail-lookup"))  # alone in its template: kept as it is
    made = shuffle_demonstrations(source, tmp_path / "shuffled.jsonl", seed=3)
    assert made == {"demonstrations": 5, "templates": 2, "unshuffled": 1}
    for record in read_trajectories(tmp_path / "shuffled.jsonl"):
        prompt, answer = record.messages[1]["content"], record.messages[2]["content"]
        assert prompt == f"task {record.task_id}"
        donor = record.metadata.get("donor_task", record.task_id)
        assert answer == f"answer for {donor}" and (donor != record.task_id) == (record.task_id != "mail-lookup-9")
        assert record.calls[0].request["messages"][1]["content"] == prompt



def _shuffled(tmp_path, demos: list, seed: int) -> list:
    """The shuffled control's records made from `demos`."""
    from orchard_cli.recipe.control import shuffle_demonstrations
    from orchard_cli.records import JsonlWriter
    from orchard_cli.trajectory import read_trajectories

    source = tmp_path / "demos.jsonl"
    with JsonlWriter(source) as writer:
        for demo in demos:
            writer.write(demo)
    shuffle_demonstrations(source, tmp_path / "shuffled.jsonl", seed=seed)
    return list(read_trajectories(tmp_path / "shuffled.jsonl"))


def test_the_shuffled_control_of_an_agent_that_renders_its_prompt_on_every_call(tmp_path):
    """orchard's web agent sends one whole prompt per call (task, actions so far, page): each of
    the donor's calls, the first included, keeps its page and history, with the recipient's task statement."""
    from orchard_cli.trajectory import Trajectory

    def prompt(task: str, step: int, i: int) -> list[dict]:  # each task's pages differ, its start page too
        return [{"role": "system", "content": "You are a web agent."},
                {"role": "user", "content": f"# Task\n{task}\n\n# Your actions so far\n{step} action(s)\n\n"
                                            f"# The page now\npage {step} of episode {i}"}]

    def demo(i: int) -> Trajectory:
        task_id, task = f"booking-cancel-{i}", f"Cancel booking number {i}."
        calls = [{"id": f"c{i}{k}", "episode": task_id, "seq": k, "endpoint": "chat", "status": 200,
                  "request": {"messages": prompt(task, k, i)},
                  "response": {"choices": [{"message": {"role": "assistant", "content": f"act {k} of {i}"}}]},
                  "timing": {"started_at": 0, "first_byte_ms": 1, "ended_ms": 1}} for k in range(3)]
        return Trajectory.model_validate({"episode_id": task_id, "task_id": task_id, "suite": "s", "harness": "web",
                                          "model": "gold", "problem_statement": task, "calls": calls,
                                          "messages": [*prompt(task, 2, i), {"role": "assistant", "content": f"act 2 of {i}"}],
                                          "outcome": {"resolved": True, "category": "resolved"}})

    for record in _shuffled(tmp_path, [demo(i) for i in range(3)], seed=1):
        own, donor = record.task_id.rsplit("-", 1)[1], record.metadata["donor_task"].rsplit("-", 1)[1]
        assert own != donor
        for k, call in enumerate(record.calls):
            text = call.request["messages"][1]["content"]
            assert f"Cancel booking number {own}." in text and f"number {donor}." not in text
            assert f"page {k} of episode {donor}" in text and f"{k} action(s)" in text, text  # where action k was taken
            assert call.response["choices"][0]["message"]["content"] == f"act {k} of {donor}"
        assert record.messages[-1]["content"] == f"act 2 of {donor}" and f"page 2 of episode {donor}" in \
            record.messages[1]["content"] and f"number {own}." in record.messages[1]["content"]


def test_a_conversation_whose_first_call_was_retried_stays_a_conversation(tmp_path):
    """The bash agent retries a failed first call: two calls of [system, user] and then the
    conversation. Every call gets the recipient's task head (its system prompt names its tools)."""
    from orchard_cli.trajectory import Trajectory

    def demo(i: int) -> Trajectory:
        task_id = f"mail-search-{i}"
        head = [{"role": "system", "content": f"tools of {task_id}"}, {"role": "user", "content": f"task {task_id}"}]
        turn = [{"role": "assistant", "content": f"search {i}"}, {"role": "user", "content": f"found {i}"}]
        requests = [head, head, head + turn]  # the first call failed and was sent again
        if i == 3:
            requests = [head, head]  # retried, and the retry answered at once

        def call(k: int, messages: list[dict]) -> dict:
            return {"id": f"c{i}{k}", "episode": task_id, "seq": k, "endpoint": "chat", "status": 500 if k == 0 else 200,
                    "request": {"messages": messages},
                    "response": {"choices": [{"message": {"role": "assistant", "content": f"act {k} of {i}"}}]},
                    "timing": {"started_at": 0, "first_byte_ms": 1, "ended_ms": 1}}
        return Trajectory.model_validate({"episode_id": task_id, "task_id": task_id, "suite": "s", "harness": "bash",
                                          "model": "gold", "problem_statement": f"task {task_id}",
                                          "calls": [call(k, m) for k, m in enumerate(requests)],
                                          "messages": head + turn, "outcome": {"resolved": True, "category": "resolved"}})

    for record in _shuffled(tmp_path, [demo(i) for i in range(4)], seed=2):
        donor = record.metadata["donor_task"].rsplit("-", 1)[1]
        for call in record.calls:
            sent = call.request["messages"]
            assert sent[0]["content"] == f"tools of {record.task_id}" and sent[1]["content"] == f"task {record.task_id}"
        if donor != "3":
            assert record.calls[2].request["messages"][2:] == [{"role": "assistant", "content": f"search {donor}"},
                                                               {"role": "user", "content": f"found {donor}"}]

def test_mcnemar_exact():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 4) == pytest.approx(0.125)
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)
    assert mcnemar_exact(3, 12) == pytest.approx(0.03515625)
    assert mcnemar_exact(5, 5) == 1.0


def test_the_synthesis_stage_list():
    config = RecipeConfig(family="web", out="/tmp/x", synth=SynthPart(n=4, heldout_n=2), rl={"enabled": True})
    assert [name for name, _ in stages(config)] == ["synth", "distill", "student", "eval-teacher", "eval-base",
                                                    "eval-student", "rl", "eval-rl"]
    assert config.train.max_seq_len == 5120 and config.harness == "bash"  # the CLI picks web's own harness


def test_the_near_miss_control_is_a_stage_and_an_arm_of_its_own(tmp_path):
    ran: list[str] = []
    _run_all(_ctx(tmp_path, control={"shuffled": True, "near_miss": True}), ran)
    assert ran == ["synth", "distill", "student", "control", "near-miss", "eval-teacher", "eval-base",
                   "eval-student", "eval-control", "eval-near-miss"]
    ran.clear()
    _run_all(_ctx(tmp_path, control={"shuffled": True, "near_miss": True, "seed": 3}), ran)
    assert ran == ["control"]  # the shuffle's seed is the shuffled control's alone (same outputs here: no eval)


def test_the_near_miss_control_trains_on_the_episodes_that_ran(tmp_path):
    """An env or infra error is no demonstration: the near-miss control's training file leaves it out."""
    from orchard_cli.recipe.stages_data import _without_errors
    from orchard_cli.records import JsonlWriter
    from orchard_cli.trajectory import Trajectory, read_trajectories

    source = tmp_path / "near.jsonl"
    with JsonlWriter(source) as writer:
        for i, category in enumerate(("unresolved", "env_error", "timeout", "infra_error", "resolved")):
            writer.write(Trajectory.model_validate({
                "episode_id": f"e{i}", "task_id": f"t-{i}", "suite": "s", "harness": "bash", "model": "near-miss",
                "messages": [], "outcome": {"resolved": category == "resolved", "category": category}}))
    assert _without_errors(source, tmp_path / "kept.jsonl") == 3
    assert [t.outcome.category for t in read_trajectories(tmp_path / "kept.jsonl")] == ["unresolved", "timeout",
                                                                                         "resolved"]

"""The model card of a value model (model_card.md): what it is, what it learnt from, how it did
on tasks it never saw, and what not to use it for."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from orchard_cli.value.actions import FEATURES as ACTION_FEATURES
from orchard_cli.value.features import SCALARS
from orchard_cli.value.metrics import STRATEGIES


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _actions_section(report: Any) -> list[str]:
    """What the card says about episodes without a patch, when the model learnt from any."""
    count = getattr(report, "actions_episodes", 0)
    if not count:
        return []
    return [
        "## Episodes without a patch", "",
        f"{count} of the {report.episodes} graded episodes had no patch (claw: mail, calendar, todos, contacts, "
        "files). The LM reads such an episode's actions where a patch would be: its tool calls (tool, compact "
        "JSON arguments, status), its final answer, the change of the service state from before to after the "
        "attempt, and the workspace files. Its patch features are 0 (has_patch 0); "
        f"{len(ACTION_FEATURES)} features read the actions ({', '.join(ACTION_FEATURES)}).",
        "",
        "What that is worth, measured on claw-mini with scripted candidates (gold, near miss, nothing done, "
        "the gold with a call dropped, repeated, or its answer cut; `bench/claw_value_bench.py`, "
        "docs/value.md): over ten 60/40 task splits the pick resolved 87% of held-out tasks against 49% for "
        "a random pick, 79% for the attempt with the most tool calls, 100% for the oracle; with whole "
        "categories held out, 82% against 80% for the most calls. It ranks mostly by those counts: it tells "
        "attempts that did the work from attempts that did not, not a right answer or change from a "
        "plausible wrong one, and it has not been measured on agent attempts. The held-out table below is "
        "this model's own.",
        "",
    ]


def model_card(meta: Any, report: Any) -> str:
    held, train = report.heldout, report.train
    when = _dt.datetime.fromtimestamp(meta.created_at, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Value model card", "",
        f"Trained {when} by `orchard rerank train` (seed {meta.seed})"
        + (f", continued from `{meta.init_from}`" if meta.init_from else "") + ".",
        "",
        "## What it is", "",
        f"A frozen small LM (`{meta.base.name}`: {meta.base.architecture}, {meta.base.layers} layers, hidden "
        f"size {meta.base.hidden_size}, fingerprint `{meta.base.fingerprint[:12]}`) with a **scalar head**: "
        "p(resolved | problem, trajectory, patch) = sigmoid(w · z + b). The LM is not fine-tuned. It reads "
        f"each episode once (problem statement, the end of the trajectory and the final patch, at most "
        f"{meta.max_tokens} tokens, the patch kept first) and gives z: {len(SCALARS)} features from its "
        f"log-probabilities, the patch's size and its relevance to the problem ({', '.join(SCALARS)}), among "
        "them the naturalness gain: how much more likely the LM finds the patched code than the code it "
        "replaces, and whether the patch edits the functions and names the problem statement mentions; "
        "and the top "
        f"{meta.components} principal components of its hidden states (mean over the patch at the middle "
        "layer, and the last token). Hidden-state components are off by default (`--pca 0`): on experience "
        "sets of tens of tasks they learnt the tasks rather than the quality of the patches (held-out picks "
        "below random), while the log-probability features carried over to unseen tasks.",
        "",
        "Why not fine-tune the LM: on a 2-core CPU one SmolLM2-135M training step at 512 tokens takes "
        "4-8 s, so minutes of fine-tuning are a few dozen steps on a few dozen examples, which do not "
        "learn. A logistic head on frozen features is fitted in under a second from the same single "
        "forward pass per episode, and can be refitted (cross-validation, `--init-from`, controls) for free.",
        "",
        (f"Training ({meta.head.objective}, {meta.head.features} features): "
         + ("L-BFGS on within-task pairs (a resolved and an unresolved episode of the same task, "
            "P(a above b) = sigmoid(w · (z_a - z_b))), so what is constant across a task cancels out; then "
            "one scale and bias fitted on the logistic loss (Platt scaling) turn the order into a probability"
            if meta.head.objective == "pairwise" else "L-BFGS on the logistic loss")
         + f", with balanced class weights (negatives weigh {meta.head.neg_ratio:g}x the positives in total), "
         f"L2 {meta.head.l2:g}; the logit is shifted by {meta.prior_shift:+.3f} so probabilities follow the "
         "training base rate."),
        "",
        *_actions_section(report),
        "## What it learnt from", "",
        f"- suites: {', '.join(meta.suites) or '-'}",
        f"- harnesses / sources: {', '.join(meta.harnesses) or '-'}",
        f"- {meta.tasks} task(s), {meta.examples} graded episode(s), {meta.positives} resolved "
        f"({meta.examples - meta.positives} not); {report.excluded_errors} env/infra error(s) excluded "
        "(never counted as negatives)",
        "- labels: the grader's verdicts only (resolved = 1, any other graded outcome = 0)",
        "",
        "## How it did on held-out tasks", "",
        f"{held.tasks} task(s) held out by task (none of their episodes was trained on), {held.examples} "
        f"candidate(s), {held.positives} resolved.",
        "",
        "| metric | held-out | training |", "| --- | ---: | ---: |",
        f"| AUC | {_num(held.auc)} | {_num(train.auc)} |",
        f"| ECE (10 bins) | {_num(held.ece)} | {_num(train.ece)} |",
        f"| Brier | {_num(held.brier)} | {_num(train.brier)} |",
        "",
        "Best of N on the held-out tasks (resolved rate of the candidate each strategy picks):", "",
        "| strategy | all candidates | non-empty, applying |", "| --- | ---: | ---: |",
    ]
    for s in STRATEGIES:
        lines.append(f"| {s} | {_pct(held.best_of_n.get(s))} | {_pct(held.best_of_n_applying.get(s))} |")
    lines += [
        "",
        f"(non-empty applying: {held.applying_tasks} task(s) with two such candidates or more; an episode "
        "without a patch counts when it made a call or gave an answer; "
        "random = the expected rate of a uniform pick; oracle = pass@N.)",
        "",
        "![reliability](reliability.png)" if report.reliability_png else "(no reliability plot: no held-out tasks, or matplotlib missing)",
        "",
        "## Use", "",
        "```",
        "orchard rerank apply --value-model THIS_DIR --runs RUN_DIR [RUN_DIR...] --out DIR",
        "orchard eval SUITE ... --attempts N --rerank THIS_DIR",
        "orchard rerank train ... --init-from THIS_DIR --out NEW_DIR   # add experience",
        "```",
        "",
        "## Limits", "",
        "- It ranks candidates of the suites and harnesses above; elsewhere its scores are untested.",
        "- It reads at most the token budget: a long trajectory is seen by its end only.",
        "- Its probabilities are calibrated to the training base rate; a suite with another base rate "
        "shifts them (the ranking within a task does not change).",
        "- A small base LM: it detects patterns (naturalness, relevance to the statement), not correctness.",
        "- Episodes without a patch (claw) are ranked mostly by what their actions amount to (calls made, "
        "state changed, an answer given), not by whether the answer or the change is the right one; see "
        "docs/value.md for how that fared on held-out claw-mini tasks.",
    ]
    if report.shuffled_labels:
        lines += ["", "**CONTROL MODEL: trained on shuffled labels. Do not use it to rerank.**"]
    return "\n".join(lines) + "\n"

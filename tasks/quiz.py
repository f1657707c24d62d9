"""Short-answer questions with a real checker: the family `orchard rl` trains on by default.

One turn, no tools, no files: the prompt is the question, the agent's reply is the answer, and the
checker looks for the expected answer as whole words in the reply (case, accents and punctuation
ignored; an alias counts). The reward is the verdict (1 resolved, 0 not). The sandbox holds
nothing but the harness (`chat`, one model call), so an episode costs a sandbox and one short
generation; it is graded from the evidence alone (a regrade needs no sandbox).

Why this family: the embedded SmolLM2-135M-Instruct solves none of the patch families' tasks, and
RL needs a pass rate between the floor and the ceiling. Sampled at temperature 1 with replies cut
at 8 tokens, SmolLM2 names the capital on about a quarter of the capitals questions (it knows them:
greedy, it answers "The capital of France is Paris."), which leaves room to learn (docs/rl.md has
the measurement). Suites: `capitals` (48 countries, to train on) and `capitals-heldout` (16 others,
never trained on); `--dataset FILE --family quiz` reads records {instance_id, question, answer,
aliases?}.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.family import BaseEpisode, BaseFamily, Gold, RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import Outcome

QUESTION = "What is the capital of {country}? Answer with one word."
CAPITALS = {  # (country, capital): the first 48 are `capitals`, the last 16 `capitals-heldout`
    "France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid",
    "Egypt": "Cairo", "Russia": "Moscow", "China": "Beijing", "Greece": "Athens", "Canada": "Ottawa",
    "Kenya": "Nairobi", "Peru": "Lima", "Portugal": "Lisbon", "Austria": "Vienna", "Norway": "Oslo",
    "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen", "Poland": "Warsaw",
    "Hungary": "Budapest", "Ireland": "Dublin", "Belgium": "Brussels", "Netherlands": "Amsterdam",
    "Thailand": "Bangkok", "Vietnam": "Hanoi", "Indonesia": "Jakarta", "Philippines": "Manila",
    "South Korea": "Seoul", "India": "Delhi", "Iran": "Tehran", "Iraq": "Baghdad", "Turkey": "Ankara",
    "Argentina": "Buenos Aires", "Chile": "Santiago", "Colombia": "Bogota", "Venezuela": "Caracas",
    "Mexico": "Mexico City", "Cuba": "Havana", "Ukraine": "Kyiv", "Romania": "Bucharest",
    "Czech Republic": "Prague", "Ethiopia": "Addis Ababa", "Nigeria": "Abuja", "Ghana": "Accra",
    "Morocco": "Rabat", "Saudi Arabia": "Riyadh", "Syria": "Damascus", "Lebanon": "Beirut",
    # held out
    "United Kingdom": "London", "Australia": "Canberra", "Brazil": "Brasilia", "Afghanistan": "Kabul",
    "Pakistan": "Islamabad", "Bangladesh": "Dhaka", "Nepal": "Kathmandu", "Malaysia": "Kuala Lumpur",
    "Libya": "Tripoli", "Switzerland": "Bern", "Serbia": "Belgrade", "Bulgaria": "Sofia",
    "Croatia": "Zagreb", "Iceland": "Reykjavik", "Jordan": "Amman", "Qatar": "Doha",
}
ALIASES = {"Delhi": ["New Delhi"], "Kyiv": ["Kiev"], "Bogota": ["Bogotá"], "Brasilia": ["Brasília"]}
TRAIN = 48


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def builtin_records() -> list[dict[str, Any]]:
    rows = []
    for i, (country, capital) in enumerate(CAPITALS.items()):
        rows.append({"instance_id": f"capital-{_slug(country)}", "question": QUESTION.format(country=country),
                     "answer": capital, "aliases": ALIASES.get(capital, []),
                     "split": "train" if i < TRAIN else "heldout"})
    return rows


def words(text: str) -> list[str]:
    """Lower-case words without accents or punctuation: what the checker compares."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.findall(r"[a-z0-9]+", plain.lower())


def contains(reply: str, answer: str) -> bool:
    """`answer`'s words appear, in order and together, among `reply`'s words."""
    hay, needle = words(reply), words(answer)
    return bool(needle) and any(hay[i:i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))


def answers(task: Task) -> list[str]:
    return [task.record["answer"], *task.record.get("aliases", [])]


class QuizEpisode(BaseEpisode):
    """One question: an empty sandbox for the harness, the reply graded from the evidence alone."""

    def prompt(self, workdir: str) -> str:
        return self.task.problem_statement

    def spec(self, backend: str) -> SandboxSpec:
        return SandboxSpec(memory="256Mi", labels={"orchard.family": "quiz"})

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        return None  # nothing to prepare: the question is the whole task

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome:
        reply = evidence.answer or ""
        expected = answers(self.task)
        ok = any(contains(reply, a) for a in expected)
        return Outcome(resolved=ok, category="resolved" if ok else "unresolved", reward=float(ok),
                       log=f"reply: {reply!r}\nexpected: {' or '.join(expected)}\n",
                       tests={"passed": int(ok), "failed": int(not ok), "summary": f"{int(ok)}/1 passed"})

    def reference(self, kind: str) -> Gold | None:
        return Gold(answer=self.task.record["answer"] if kind == "gold" else "I do not know.")


class QuizFamily(BaseFamily):
    name = "quiz"
    grading = "in_place"
    harness = "chat"  # one call, no tools: the reply is the answer
    suites = (
        SuiteInfo("capitals", "quiz", "builtin:train", "48 capital-city questions, one short answer each (RL)"),
        SuiteInfo("capitals-heldout", "quiz", "builtin:heldout", "16 other capital-city questions, held out"),
    )

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        from orchard_cli.tasks.datafile import read_records

        if source.dataset or not info.source.startswith("builtin:"):
            path = source.dataset or info.source
            rows = read_records(path)
        else:
            path, split = "builtin", info.source.split(":", 1)[1]
            rows = [r for r in builtin_records() if r["split"] == split]
        for row in rows:
            missing = [k for k in ("instance_id", "question", "answer") if not row.get(k)]
            if missing:
                raise UsageError(f"{path}: task {row.get('instance_id', '?')!r} lacks {', '.join(missing)}")
        return Suite(info=info, tasks=[Task(task_id=r["instance_id"], suite=info.name, family=self.name,
                                            problem_statement=r["question"], record=r) for r in rows])

    def episode(self, task: Task, options: RunOptions) -> QuizEpisode:
        return QuizEpisode(task, options)

    def describe(self, task: Task) -> dict[str, Any]:
        return {"instance_id": task.task_id, "suite": task.suite, "family": task.family,
                "question": task.problem_statement, "answer": task.record["answer"],
                "aliases": task.record.get("aliases", [])}

    def groups(self, task: Task) -> dict[str, str]:
        return {}

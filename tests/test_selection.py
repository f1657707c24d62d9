"""One task selection for every family (orchard_cli.selection): ids, repository, groups, slice,
a seeded stratified sample and a limit, applied once by the core; the filters every family used
to copy from SWE's dataset code behave as they did."""

from __future__ import annotations

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.family import Task
from orchard_cli.selection import TaskSelection, parse_groups


def _task(i: int, repo: str = "", family: str = "x") -> Task:
    return Task(task_id=f"t{i}", suite="s", family=family, problem_statement="", repo=repo)


TASKS = [_task(i, repo=f"org/{'ab'[i % 2]}") for i in range(10)]
KINDS = {f"t{i}": {"kind": "mail" if i < 6 else "calendar", "level": "easy" if i % 3 else "hard"} for i in range(12)}
GROUPED = [_task(i) for i in range(12)]


def _groups(task: Task) -> dict[str, str]:
    return KINDS[task.task_id]


def _ids(tasks: list[Task]) -> list[str]:
    return [t.task_id for t in tasks]


def test_ids_keep_the_datas_order_and_unknown_ones_are_named():
    chosen = TaskSelection(suite="s", instances=["t5", "t2", "t5"]).apply(TASKS, lambda t: {})
    assert _ids(chosen) == ["t2", "t5"]
    with pytest.raises(UsageError, match="unknown instance id.*nope"):
        TaskSelection(suite="s", instances=["t1", "nope"]).apply(TASKS, lambda t: {})


def test_unlisted_tasks_run_only_when_named():
    assert "t3" not in _ids(TaskSelection(suite="s").apply(TASKS, lambda t: {}, unlisted={"t3"}))
    assert _ids(TaskSelection(suite="s", instances=["t3"]).apply(TASKS, lambda t: {}, unlisted={"t3"})) == ["t3"]


def test_repo_matches_the_repository_or_its_name_alone():
    assert _ids(TaskSelection(suite="s", repo="org/a").apply(TASKS, lambda t: {})) == ["t0", "t2", "t4", "t6", "t8"]
    assert _ids(TaskSelection(suite="s", repo="b").apply(TASKS, lambda t: {})) == ["t1", "t3", "t5", "t7", "t9"]
    with pytest.raises(UsageError, match="no instance of repository 'org/c'") as info:
        TaskSelection(suite="s", repo="org/c").apply(TASKS, lambda t: {})
    assert info.value.hint == "repositories here: org/a, org/b"


def test_repo_on_a_family_without_repositories_matches_a_grouping_as_it_always_did():
    """claw's old `--repo claw/mail` (its rows faked a repository of its category) still works."""
    assert _ids(TaskSelection(suite="s", repo="claw/calendar").apply(GROUPED, _groups)) == ["t6", "t7", "t8", "t9",
                                                                                              "t10", "t11"]


def test_groups_filter_and_name_the_values_there_are():
    chosen = TaskSelection(suite="s", groups={"kind": ["mail"], "level": ["hard"]}).apply(GROUPED, _groups)
    assert _ids(chosen) == ["t0", "t3"]
    with pytest.raises(UsageError, match="no task in group kind=todo") as info:
        TaskSelection(suite="s", groups={"kind": ["todo"]}).apply(GROUPED, _groups)
    assert info.value.hint == "values of kind here: calendar, mail"
    repo = TaskSelection(suite="s", groups={"repo": ["org/b"]}).apply(TASKS, lambda t: {})
    assert _ids(repo) == ["t1", "t3", "t5", "t7", "t9"]  # a task's repository is its `repo` grouping


def test_several_values_of_a_key_are_any_of_them_and_keys_all_of_them():
    chosen = TaskSelection(suite="s", groups={"kind": ["mail", "calendar"], "level": ["hard"]}).apply(GROUPED, _groups)
    assert _ids(chosen) == ["t0", "t3", "t6", "t9"]
    with pytest.raises(UsageError, match=r"no task in group kind=mial \(did you mean mail\?\)"):
        TaskSelection(suite="s", groups={"kind": ["calendar", "mial"]}).apply(GROUPED, _groups)


def test_a_key_the_familys_tasks_lack_is_refused_naming_the_keys_they_have():
    with pytest.raises(UsageError, match=r"no grouping 'knid' \(did you mean kind\?\); keys: kind, level$"):
        TaskSelection(suite="s", groups={"knid": ["mail"]}).apply(GROUPED, _groups)
    with pytest.raises(UsageError, match=r"no grouping 'kind'.*; keys: repo$"):
        TaskSelection(suite="s", groups={"kind": ["mail"]}).apply(TASKS, lambda t: {})


def test_a_selection_written_with_one_value_per_key_reads_as_a_list():
    assert TaskSelection.model_validate({"suite": "s", "groups": {"kind": "mail"}}).groups == {"kind": ["mail"]}


def test_slice_then_limit():
    assert _ids(TaskSelection(suite="s", slice="2:8", limit=3).apply(TASKS, lambda t: {})) == ["t2", "t3", "t4"]
    with pytest.raises(UsageError, match="bad --slice"):
        TaskSelection(suite="s", slice="a:b").apply(TASKS, lambda t: {})


def test_a_sample_is_spread_over_the_groups_seeded_and_in_the_datas_order():
    one = TaskSelection(suite="s", sample=4, sample_seed=7).apply(GROUPED, _groups)
    assert _ids(one) == _ids(TaskSelection(suite="s", sample=4, sample_seed=7).apply(GROUPED, _groups))
    strata = {tuple(sorted(_groups(t).items())) for t in one}
    assert len(one) == 4 and len(strata) == 4  # four strata (kind x level): one task of each
    assert _ids(one) == sorted(_ids(one), key=lambda i: int(i[1:]))
    others = {tuple(_ids(TaskSelection(suite="s", sample=4, sample_seed=s).apply(GROUPED, _groups))) for s in range(8)}
    assert len(others) > 1  # the seed decides which
    assert len(TaskSelection(suite="s", sample=50).apply(GROUPED, _groups)) == 12


def test_group_flags_parse_and_refuse_what_is_not_key_value():
    assert parse_groups(["category=mail", " site = shop ", "category=todo", "category=mail"]) == {
        "category": ["mail", "todo"], "site": ["shop"]}
    assert parse_groups(None) is None
    with pytest.raises(UsageError, match="--group 'mail' is not KEY=VALUE"):
        parse_groups(["mail"])


def test_a_selection_hashes_as_before_it_grew():
    """rl fingerprints a run by its selection: one made before `groups` and `sample` (the version-1
    selection of tasks/base.py, `network` and harbor's `image_map` in it) resumes."""
    old = {"suite": "capitals", "family": None, "dataset": None, "instances": None, "repo": None, "limit": 8,
           "slice": None, "repo_mirror": None, "network": "none", "image_map": {}}
    selection = TaskSelection.model_validate(old)
    assert selection.stable_dump() == old
    assert TaskSelection(suite="capitals", sample=3).stable_dump()["sample"] == 3

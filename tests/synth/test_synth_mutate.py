"""Mutation operators on small code samples: each kind gives a valid, different AST, and the gold
patch (git diff from the mutated commit) puts the source back byte for byte."""

from __future__ import annotations

import ast
import subprocess

import pytest

from orchard_cli.tasks.synth.mutate import KINDS, find_mutations, is_source_file
from orchard_cli.tasks.synth.instances import mutant_commit
from orchard_cli.tasks.synth.source import commit_tree, git
from orchard_cli.tasks.synth.synth import candidate_order

SAMPLES = {
    "compare": ("def f(a, b):\n    return a < b\n", "a <= b"),
    "boolop": ("def f(a, b):\n    if a and not b:\n        return 1\n    return 0\n", "a or not b"),
    "off_by_one": ("def f(xs):\n    return [xs[i] for i in range(len(xs))][1:]\n", "range(len(xs) - 1)"),
    "swap_args": ("def f(a, b):\n    return pow(a, b)  # keep\n", "pow(b, a)"),
    "drop_statement": ("def f(xs):\n    out = []\n    out.append(xs)\n    return out\n",
                       "    out = []\n    return out\n"),
    "drop_branch": ("def f(x):\n    if x > 0:\n        y = 1\n    else:\n        y = 2\n    return y\n",
                    "        y = 1\n    return y\n"),
    "constant": ("def f(x):\n    return x * 3 + True\n", "x * 4"),
    "return_value": ("def f(x):\n    return x.strip()\n", "return None"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_mutates_validly(kind: str) -> None:
    source, expected = SAMPLES[kind]
    found = [m for m in find_mutations("pkg/mod.py", source) if m.kind == kind]
    assert found, f"no {kind} mutation in {source!r}"
    original = ast.dump(ast.parse(source))
    texts = [m.apply(source) for m in found]
    for text in texts:
        assert ast.dump(ast.parse(text)) != original
    assert any(expected in text for text in texts), texts


@pytest.mark.parametrize("kind", KINDS)
def test_gold_patch_restores_the_source(tmp_path, kind: str) -> None:
    source, _ = SAMPLES[kind]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(source)
    commit_tree(tmp_path, "clean\n")
    mutation = next(m for m in find_mutations("pkg/mod.py", source) if m.kind == kind)
    base, patch = mutant_commit(tmp_path, "pkg", "1.0", mutation, source)
    assert patch.startswith("diff --git a/pkg/mod.py b/pkg/mod.py")
    assert (tmp_path / "pkg" / "mod.py").read_text() == source  # the scratch tree is clean again
    git(tmp_path, "checkout", "--quiet", "--", ".")
    assert (tmp_path / "pkg" / "mod.py").read_text() == mutation.apply(source)
    assert git(tmp_path, "rev-parse", "HEAD").strip() == base
    git(tmp_path, "apply", "-", stdin=patch)
    assert (tmp_path / "pkg" / "mod.py").read_text() == source
    # patch(1) agrees with git apply (SWE-bench's fallback)
    git(tmp_path, "checkout", "--quiet", "--", ".")
    subprocess.run(["patch", "-p1", "--quiet"], input=patch, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "pkg" / "mod.py").read_text() == source


def test_leaves_module_level_docstrings_and_guards_alone() -> None:
    source = ('"""Doc 1 < 2."""\nLIMIT = 3\nif LIMIT > 2:\n    X = [1, 2]\n\n'
              'def f(x):\n    """Return x < 5."""\n    return x\n\n'
              'if __name__ == "__main__":\n    f(1 < 2)\n')
    found = find_mutations("m.py", source)
    assert found and all(m.function == "f" for m in found)
    assert all(m.line == 8 for m in found), [m.describe() for m in found]


def test_an_elif_is_dropped_whole() -> None:
    source = "def f(x):\n    if x > 1:\n        return 1\n    elif x < 0:\n        return 2\n    return 3\n"
    dropped = [m.apply(source) for m in find_mutations("m.py", source) if m.kind == "drop_branch"]
    assert "def f(x):\n    if x > 1:\n        return 1\n    return 3\n" in dropped


def test_unicode_columns_and_single_line_blocks() -> None:
    source = 'def f(s):\n    t = "héllo wörld"; u = s[1:]\n    return t < u\n'
    for m in find_mutations("m.py", source):
        ast.parse(m.apply(source))
    compare = [m for m in find_mutations("m.py", source) if m.kind == "compare"]
    assert compare and compare[0].apply(source).endswith("return t <= u\n")
    # statements sharing a line are never dropped
    assert not [m for m in find_mutations("m.py", source) if m.kind == "drop_statement"]


def test_mutations_are_deterministic_and_ordered_by_seed() -> None:
    source = "".join(text for text, _ in SAMPLES.values()).replace("def f(", "def f_")
    source = "\n".join(f"def g{i}(" + line[6:] if line.startswith("def f_") else line
                       for i, line in enumerate(source.splitlines())) + "\n"
    first, second = find_mutations("m.py", source), find_mutations("m.py", source)
    assert [m.id for m in first] == [m.id for m in second]
    order = [m.id for m in candidate_order(first, 7, "pkg==1")]
    assert order == [m.id for m in candidate_order(second, 7, "pkg==1")]
    assert order != [m.id for m in candidate_order(first, 8, "pkg==1")]
    assert sorted(order) == sorted(m.id for m in first)
    kinds = [m.kind for m in candidate_order(first, 7, "pkg==1")][:len(KINDS)]
    assert kinds == list(KINDS)  # kinds take turns


@pytest.mark.parametrize("path,expected", [
    ("toolz/itertoolz.py", True), ("src/pkg/core.py", True), ("six.py", True),
    ("tests/test_x.py", False), ("toolz/tests/test_a.py", False), ("test_six.py", False),
    ("pkg/conftest.py", False), ("setup.py", False), ("docs/conf.py", False),
    ("pkg/x_test.py", False), ("pkg/_version.py", False), ("README.md", False),
])
def test_only_library_code_is_mutated(path: str, expected: bool) -> None:
    assert is_source_file(path) is expected

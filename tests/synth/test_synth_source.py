"""sdist -> deterministic repository, through real pip (a local file:// index) and real git."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchard_cli.errors import OrchardError
from orchard_cli.tasks.synth import source
from orchard_cli.tasks.synth.mutate import find_mutations
from orchard_cli.tasks.synth.instances import mutant_commit
from synth_pkgindex import CALC, make_index, make_sdist

# The commit of TREE made by commit_tree: the same on every machine, or rebuilds break.
TREE = {"README": "hello\n", "pkg/__init__.py": "X = 1\n", "pkg/run.sh": "#!/bin/sh\necho hi\n"}
TREE_COMMIT = "d56cd4e972eb23abcdf8ed1c82032b24d8451c5a"


def _write(folder: Path, files: dict[str, str], reverse: bool = False) -> None:
    for path in sorted(files, reverse=reverse):
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[path])
    (folder / "pkg" / "run.sh").chmod(0o755)


@pytest.fixture()
def index(tmp_path, monkeypatch):
    dists = tmp_path / "dists"
    archives = [make_sdist(dists, "tinycalc", "0.1", CALC), make_sdist(dists, "tinycalc", "0.2", CALC)]
    url = make_index(tmp_path / "index", archives)
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    return archives


def test_commit_is_deterministic(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, TREE)
    old = os.umask(0o077)
    try:
        _write(two, TREE, reverse=True)
    finally:
        os.umask(old)
    os.utime(two / "README", (1, 1))
    (two / ".gitignore").write_text("*.sh\n")
    (one / ".gitignore").write_text("*.sh\n")  # ignored files are committed all the same
    first, second = source.commit_tree(one, "m\n"), source.commit_tree(two, "m\n")
    assert first == second
    assert "pkg/run.sh" in source.git(one, "ls-files")
    assert source.git(one, "log", "--format=%an <%ae> %ad", "--date=unix").strip() == \
        "orchard-synth <synth@orchard.invalid> 1704067200"


def test_commit_id_is_pinned(tmp_path) -> None:
    _write(tmp_path, TREE)
    assert source.commit_tree(tmp_path, "m\n") == TREE_COMMIT


def test_fetch_records_sha256_and_caches(tmp_path, index, monkeypatch) -> None:
    archive = source.fetch_sdist("tinycalc", "0.1")
    assert archive.read_bytes() == index[0].read_bytes()
    digest = source.sha256_file(archive)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "nowhere").as_uri())  # cached: no pip needed
    assert source.fetch_sdist("tinycalc", "0.1", digest) == archive
    monkeypatch.setenv("PIP_INDEX_URL", make_index(tmp_path / "index", index))
    with pytest.raises(source.SourceMismatch, match="sha256"):
        source.fetch_sdist("tinycalc", "0.1", "0" * 64)


def test_missing_version_names_the_known_ones(index) -> None:
    with pytest.raises(source.SourceError) as caught:
        source.fetch_sdist("tinycalc", "9.9")
    assert caught.value.message == ("tinycalc==9.9: no such release with a source distribution "
                                    "(latest: 0.1, 0.2)")


@pytest.mark.parametrize("spec", ["tinycalc", "tinycalc>=1", "==1.0", "a==1 b==2"])
def test_package_spec_must_pin_one_release(spec: str) -> None:
    with pytest.raises(OrchardError, match="NAME==VERSION"):
        source.parse_spec(spec)


def test_rebuild_gives_one_commit_with_the_bug(tmp_path, index) -> None:
    tree = tmp_path / "tree"
    clean, digest, archive = source.clean_tree("tinycalc", "0.1", None, tree)
    path = "src/tinycalc/__init__.py"
    original = (tree / path).read_text()
    mutation = next(m for m in find_mutations(path, original) if m.kind == "compare")
    base, patch = mutant_commit(tree, "tinycalc", "0.1", mutation, original)
    record = {"instance_id": "tinycalc__0.1-x", "base_commit": base, "patch": patch,
              "source": source.SdistSource(package="tinycalc", version="0.1", filename=archive.name,
                                           sha256=digest, commit=clean).model_dump()}
    shutil.rmtree(archive.parent)  # from scratch: download again, verify, unpack, mutate
    repo = source.rebuild_repository(record)
    assert source.git(repo, "rev-list", "--all").split() == [base]  # no parent: no clean tree
    assert (repo / path).read_text() == mutation.apply(original)
    assert source.rebuild_repository(record) == repo
    with pytest.raises(source.SourceMismatch, match="base_commit"):
        source.build_repository({**record, "base_commit": clean}, tmp_path / "again")

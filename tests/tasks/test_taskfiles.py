"""The guarded loader for task data (tasks/kit): a task folder, a suite folder, a data file or an
archive from elsewhere cannot make orchard read the host. For each family that reads a folder or a
file: a link to a file outside (refused), a link inside (works), a folder link, a `..` path, a
FIFO (refused, nothing waits on it) and a 2 GB sparse file (refused unread); a refusal is one line
naming the task and the path, exit 2 at load, before any episode. Claw-Eval's checkouts:
tests/tasks/claw_eval/test_claw_eval_taskfiles.py."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from orchard_cli.main import main
from orchard_cli.tasks.claw.synth import synthesize
from orchard_cli.tasks.claw.taskfile import load_task_dir
from orchard_cli.tasks.kit.taskfiles import TaskDataError, TaskFiles, task_folders, unpack_archive

CANARY = "ORCHARD-CANARY-7f3a91"
WEB_MINI = Path(__file__).resolve().parents[2] / "tasks" / "data" / "web-mini"


@pytest.fixture
def secret(tmp_path) -> Path:
    """A 0600 file and a folder outside every task folder, holding the canary."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "secret.txt"
    path.write_text(f"{CANARY}\n")
    path.chmod(0o600)
    return path


def _sparse(path: Path, size: int = 2 << 30) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _claw(root: Path, kind: str = "files-report", seed: int = 3) -> Path:
    data = synthesize(kind, seed)
    folder = root / data["id"]
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _refused(call, *mentions: str) -> str:
    started = time.monotonic()
    with pytest.raises(TaskDataError) as caught:
        call()
    assert time.monotonic() - started < 20, "a refusal never waits on the file"
    message = caught.value.message
    assert "\n" not in message and CANARY not in message, message
    for mention in mentions:
        assert mention in message, (mention, message)
    return message


# ---- the kit ---------------------------------------------------------------------------------

def test_the_guard_keeps_every_path_inside_its_roots(tmp_path, secret):
    folder = tmp_path / "task"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "a.txt").write_text("inside\n")
    (folder / "inner").symlink_to("docs")  # a folder link that stays inside
    (folder / "also.txt").symlink_to("docs/a.txt")
    (folder / "leak.txt").symlink_to(secret)
    (folder / "out").symlink_to(secret.parent)
    (folder / "loop").symlink_to(".")
    files = TaskFiles("t1", folder)
    assert files.read_text("also.txt") == "inside\n" and files.read_text("inner/a.txt") == "inside\n"
    assert files.read_text("docs/../docs/a.txt") == "inside\n"
    _refused(lambda: files.read_text("leak.txt"), "task t1", "leak.txt", str(secret), "symbolic link")
    _refused(lambda: files.read_text("out/secret.txt"), "task t1", "out/secret.txt")
    _refused(lambda: files.read_text("../outside/secret.txt"), "task t1", "../outside/secret.txt", "'..'")
    _refused(lambda: files.read_text(str(secret)), "absolute")
    _refused(lambda: files.files("."), "task t1", "leak.txt")
    (folder / "leak.txt").unlink()
    (folder / "out").unlink()
    _refused(lambda: files.files("."), "loop", "a loop")
    (folder / "loop").unlink()
    assert [name for name, _ in files.files(".")] == ["also.txt", "docs/a.txt", "inner/a.txt"]
    assert files.read_tree("inner") == {"inner/a.txt": b"inside\n"}


def test_special_files_and_sizes_are_refused_before_reading(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    _fifo(folder / "pipe")
    _sparse(folder / "huge.bin")
    (folder / "ok.txt").write_text("x")
    files = TaskFiles("t2", folder)
    _refused(lambda: files.read_bytes("pipe"), "task t2", "pipe", "FIFO")
    _refused(lambda: files.read_bytes("huge.bin"), "task t2", "huge.bin", "2,048 MiB")
    _refused(lambda: files.files("."), "huge.bin")
    _refused(lambda: files.read_bytes("ok.txt", limit=0), "ok.txt")
    assert files.check(["ok.txt", "gone.txt"]) == ["gone.txt"]


def test_a_further_root_is_looked_up_only_when_asked(tmp_path, secret):
    checkout = tmp_path / "checkout"
    folder = checkout / "tasks" / "T1"
    folder.mkdir(parents=True)
    (checkout / "shared.txt").write_text("from the root\n")
    (folder / "mine.txt").write_text("from the task\n")
    alone = TaskFiles("T1", folder)
    with_root = TaskFiles("T1", folder, also=[checkout])
    assert not alone.exists("shared.txt") and with_root.read_text("shared.txt") == "from the root\n"
    assert with_root.read_text("mine.txt") == "from the task\n"  # the task folder first
    _refused(lambda: alone.read_text("../../shared.txt"), "'..'")
    assert with_root.read_text("../../shared.txt") == "from the root\n"  # inside the checkout: allowed
    (checkout / "leak.txt").symlink_to(secret)
    _refused(lambda: with_root.read_text("leak.txt"), "task T1", "leak.txt", str(checkout))


def test_task_folders_linked_out_of_the_suite_are_refused(tmp_path, secret):
    suite = tmp_path / "suite"
    task = _claw(suite)
    (suite / "alias").symlink_to(task.name)  # inside: listed
    assert [p.name for p in task_folders(suite)] == ["alias", task.name]
    elsewhere = _claw(tmp_path / "elsewhere", seed=4)
    (suite / "foreign").symlink_to(elsewhere)
    _refused(lambda: task_folders(suite), "task foreign", "foreign", str(elsewhere))


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(_info("pkg-1.0/ok.txt", b"fine\n"), io.BytesIO(b"fine\n"))
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def _info(name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("member, mention", [
    (_info("pkg-1.0/../../escape.txt"), "'..'"),
    (_info("/etc/cron.d/job"), "absolute"),
    (_info("pkg-1.0/link", kind=tarfile.SYMTYPE, link="../../../etc/passwd"), "outside the archive"),
    (_info("pkg-1.0/abs", kind=tarfile.SYMTYPE, link="/etc/passwd"), "absolute"),
    (_info("pkg-1.0/hard", kind=tarfile.LNKTYPE, link="../etc/passwd"), "outside the archive"),
    (_info("pkg-1.0/pipe", kind=tarfile.FIFOTYPE), "FIFO"),
])
def test_an_archive_entry_that_leaves_its_folder_refuses_the_archive_whole(tmp_path, member, mention):
    archive = _tar(tmp_path / "pkg-1.0.tar.gz", member)
    dest = tmp_path / "out"
    _refused(lambda: unpack_archive(archive, dest), "pkg-1.0.tar.gz", member.name, mention)
    assert not dest.exists() or not any(dest.rglob("*")), "nothing written"
    assert not (tmp_path / "escape.txt").exists()


def test_archives_unpack_and_their_size_is_capped_before_writing(tmp_path):
    good = _tar(tmp_path / "good.tar.gz", _info("pkg-1.0/inner", kind=tarfile.SYMTYPE, link="ok.txt"))
    unpack_archive(good, tmp_path / "good")
    assert (tmp_path / "good/pkg-1.0/inner").read_text() == "fine\n"
    big = tmp_path / "big.zip"
    with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/zeros.bin", b"\0" * (4 << 20))  # a few KB on disk
        zf.writestr("../escape.txt", b"x")
    _refused(lambda: unpack_archive(big, tmp_path / "big", limit=1 << 20), "big.zip", "pkg/zeros.bin", "more than")
    _refused(lambda: unpack_archive(big, tmp_path / "big"), "big.zip", "../escape.txt", "'..'")
    assert not (tmp_path / "big").exists() and not (tmp_path / "escape.txt").exists()


# ---- claw task folders -------------------------------------------------------------------------

def _cli(capsys, argv) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert CANARY not in captured.out + captured.err
    return code, captured.err


@pytest.mark.parametrize("make, path", [
    (lambda ws, secret: (ws / "leak.txt").symlink_to(secret), "workspace/leak.txt"),
    (lambda ws, secret: (shutil.rmtree(ws), ws.symlink_to(secret.parent)), "workspace"),
    (lambda ws, secret: (ws / "notes").symlink_to(secret.parent), "workspace/notes"),
    (lambda ws, secret: _fifo(ws / "pipe.txt"), "workspace/pipe.txt"),
    (lambda ws, secret: _sparse(ws / "huge.txt"), "workspace/huge.txt"),
    (lambda ws, secret: ((ws.parent / "task.yaml").rename(secret.parent / "task.yaml"),
                         (ws.parent / "task.yaml").symlink_to(secret.parent / "task.yaml")), "task.yaml"),
], ids=["file-link-out", "workspace-link-out", "folder-link-out", "fifo", "sparse-2GB", "task.yaml-link-out"])
def test_a_claw_folder_that_reaches_out_is_refused_at_load_by_validate_and_eval(tmp_path, secret, capsys,
                                                                               monkeypatch, make, path):
    suite = tmp_path / "suite"
    folder = _claw(suite)
    (folder / "workspace").mkdir()
    (folder / "workspace" / "expenses.csv").write_text(yaml.safe_load((folder / "task.yaml").read_text())
                                                       ["workspace"]["expenses.csv"])
    make(folder / "workspace", secret)
    monkeypatch.chdir(tmp_path)
    code, err = _cli(capsys, ["tasks", "validate", str(suite)])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and lines[0].startswith("error:") and f"task {folder.name}: {path}" in lines[0], err
    code, err = _cli(capsys, ["eval", str(suite), "--predictions", "gold", "--out", str(tmp_path / "run")])
    assert code == 2 and f"task {folder.name}: {path}" in err, err
    assert not (tmp_path / "run").exists(), "never a partial run"


def test_a_claw_folder_with_links_inside_loads_them(tmp_path):
    folder = _claw(tmp_path / "suite")
    (folder / "shared").mkdir()
    (folder / "shared" / "policy.md").write_text("Reply within a day.\n")
    (folder / "workspace").mkdir()
    (folder / "workspace" / "policy.md").symlink_to("../shared/policy.md")
    (folder / "workspace" / "more").symlink_to("../shared")
    task = load_task_dir(folder)
    assert task.workspace["policy.md"] == task.workspace["more/policy.md"] == "Reply within a day.\n"
    assert "expenses.csv" in task.workspace


# ---- web task folders --------------------------------------------------------------------------

def test_web_task_folders_read_through_the_guard(tmp_path, secret):
    from orchard_cli.tasks.web.family import folder_sha256
    from orchard_cli.tasks.web.taskfile import load_task_dir as load_web
    from orchard_cli.tasks.web.taskfile import task_folders as web_folders

    suite = tmp_path / "web"
    name = sorted(p.name for p in WEB_MINI.iterdir())[0]
    shutil.copytree(WEB_MINI / name, suite / name)
    (suite / "linked").mkdir()
    shutil.copy(suite / name / "task.yaml", suite / "linked" / "original.yaml")
    (suite / "linked" / "task.yaml").symlink_to("original.yaml")  # inside its folder: works
    assert load_web(suite / "linked").id == load_web(suite / name).id
    (suite / "linked" / "task.yaml").unlink()
    (suite / "linked" / "task.yaml").symlink_to(f"../{name}/task.yaml")  # another task's: outside
    _refused(lambda: load_web(suite / "linked"), "task linked", "task.yaml")
    (suite / "linked" / "task.yaml").unlink()
    (suite / "linked" / "task.yaml").symlink_to("original.yaml")
    assert len(folder_sha256(web_folders(suite))) == 64
    (suite / "linked" / "task.yaml").unlink()
    shutil.copy(suite / name / "task.yaml", secret.parent / "task.yaml")
    (suite / "linked" / "task.yaml").symlink_to(secret.parent / "task.yaml")
    _refused(lambda: load_web(suite / "linked"), "task linked", "task.yaml")
    _refused(lambda: folder_sha256(web_folders(suite)), "task linked", "task.yaml")
    (suite / "linked" / "task.yaml").unlink()
    _fifo(suite / "linked" / "task.yaml")
    _refused(lambda: load_web(suite / "linked"), "task linked", "task.yaml", "FIFO")
    shutil.rmtree(suite / "linked")
    (suite / "linked").symlink_to(WEB_MINI / name)  # a task folder linked out of the suite
    _refused(lambda: web_folders(suite), "task linked", str(WEB_MINI / name))


# ---- data files (live-web suites, calc/quiz records) -------------------------------------------

WEBVOYAGER_ROW = {"web_name": "Example", "id": "Example--1", "ques": "Find the title.", "web": "https://example.com/"}


def test_a_data_file_is_read_through_the_guard(tmp_path, secret, capsys, monkeypatch):
    from orchard_cli.tasks.datafile import read_records
    from orchard_cli.tasks.registry import load_suite

    data = tmp_path / "data"
    data.mkdir()
    (data / "real.jsonl").write_text(json.dumps(WEBVOYAGER_ROW) + "\n")
    (data / "WebVoyager_data.jsonl").symlink_to("real.jsonl")  # a dataset's own link, inside: works
    _, tasks = load_suite("webvoyager", dataset=str(data / "WebVoyager_data.jsonl"))
    assert [t.task_id for t in tasks] == ["Example--1"]
    (data / "leak.jsonl").symlink_to(secret)
    _fifo(data / "pipe.jsonl")
    _sparse(data / "huge.jsonl")
    for name, why in (("leak.jsonl", "symbolic link"), ("pipe.jsonl", "FIFO"), ("huge.jsonl", "2,048 MiB")):
        _refused(lambda: load_suite("webvoyager", dataset=str(data / name)), str(data / name), why)
        _refused(lambda: read_records(data / name), str(data / name), why)
    monkeypatch.chdir(tmp_path)
    code, err = _cli(capsys, ["tasks", "ls", "webvoyager", "--dataset", str(data / "leak.jsonl")])
    assert code == 2 and str(data / "leak.jsonl") in err, err

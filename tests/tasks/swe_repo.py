"""A small but real SWE-bench-format instance: a git repository with a bug, its fix, a test patch.

`make_instances(mirror)` creates `acme/calc` under the mirror folder and returns instance records:
one written like the dataset's (an eval_script for /testbed and conda), one with its own recipe
only (test_cmd), plus the patches the tests grade (gold, wrong, non-applying, hanging).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = "acme/calc"
CREATED_AT = "2024-05-01T12:00:00Z"
COMMITTED_AT = "2024-04-30T12:00:00Z"  # every commit of the repository: the era date of its environment
# No network in tests: the runner is unittest (read by the official django parser, which reads
# unittest's verbose output), the install builds with the interpreter's own setuptools, and the
# one package uv installs is a wheel the test writes into the mirror (seen at /orchard/repo).
RECIPE = {"python": "3.10", "packages": ["calc-extras @ file:///orchard/repo/dist/calc_extras-1.0-py3-none-any.whl"],
          "install": ["python -m pip install --no-build-isolation -e ."], "log_parser": "django"}
TEST_CMD = "python -m unittest -v tests.test_calc"

BUGGY = '''def add(a, b):
    return a - b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
TESTS = '''import unittest

import calc_extras
from calc import mul, sub


class CalcTests(unittest.TestCase):
    def test_sub(self):
        self.assertEqual(sub(3, 1), calc_extras.TWO)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)

    @unittest.skip("not today")
    def test_later(self):
        self.fail()
'''


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd),
           "GIT_AUTHOR_DATE": COMMITTED_AT, "GIT_COMMITTER_DATE": COMMITTED_AT}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout


def diff_of(work: Path, path: str, new_text: str) -> str:
    """The unified diff that turns `path` into `new_text` (the work tree is left unchanged)."""
    target = work / path
    old = target.read_text()
    target.write_text(new_text)
    try:
        return git(work, "diff", "--", path)
    finally:
        target.write_text(old)


def make_project(mirror: Path, repo: str, files: dict[str, str]) -> tuple[Path, str]:
    """A git repository `repo` (owner/name) under the mirror folder holding `files`: (work tree, commit)."""
    work = mirror / repo
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", f"{repo} as it was")
    return work, git(work, "rev-parse", "HEAD").strip()


def make_repo(mirror: Path) -> tuple[Path, str]:
    work = mirror / "acme" / "calc"
    (work / "calc").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "setup.py").write_text('from setuptools import setup\n\n'
                                   'setup(name="calc", version="0.1", packages=["calc"])\n')
    (work / "calc" / "__init__.py").write_text(BUGGY)
    (work / "tests" / "test_calc.py").write_text(TESTS)
    (work / "tests" / "__init__.py").write_text("")
    (work / ".gitignore").write_text("*.egg-info/\n__pycache__/\ndist/\n")
    write_wheel(work / "dist")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "calc with a bug in add")
    return work, git(work, "rev-parse", "HEAD").strip()


def make_instances(mirror: Path) -> dict:
    work, base = make_repo(mirror)
    src = "calc/__init__.py"
    gold = diff_of(work, src, BUGGY.replace("return a - b", "return a + b", 1))
    wrong = diff_of(work, src, BUGGY.replace("return a - b", "return a * b", 1))
    hang = diff_of(work, src, "import time\n\n" + BUGGY.replace(
        "    return a - b", "    time.sleep(600)\n    return a + b", 1))
    breaks_p2p = diff_of(work, src, BUGGY.replace("return a - b", "return a + b", 1)
                         .replace("return a * b", "return a ** b"))
    test_patch = diff_of(work, "tests/test_calc.py", TESTS.replace(
        "from calc import mul, sub", "from calc import add, mul, sub").replace(
        "    def test_sub(self):", "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
                               "    def test_sub(self):"))
    not_applying = gold.replace("return a - b", "return a - b - 0").replace("+    return a + b",
                                                                         "+    return b + a")
    f2p = ["test_add (tests.test_calc.CalcTests)"]
    p2p = ["test_sub (tests.test_calc.CalcTests)", "test_mul (tests.test_calc.CalcTests)"]
    common = {"repo": REPO, "base_commit": base, "environment_setup_commit": base,
              "patch": gold, "test_patch": test_patch, "created_at": CREATED_AT, "version": "0.1",
              "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p),
              "hints_text": "", "problem_statement": "add() subtracts instead of adding"}
    scripted = {**common, "instance_id": "acme__calc-1", "environment": RECIPE,
                "eval_script": dataset_style_script(base, test_patch)}
    own = {**common, "instance_id": "acme__calc-2",
           "environment": {**RECIPE, "test_cmd": TEST_CMD}}
    return {"scripted": scripted, "own": own, "gold": gold, "wrong": wrong, "hang": hang,
            "breaks_p2p": breaks_p2p, "not_applying": not_applying, "base": base}


def write_suite(root: Path) -> tuple[dict, Path]:
    """The instances (mirror at root/mirror) and a SWE-bench-format file of the two graded ones."""
    instances = make_instances(root / "mirror")
    data = root / "calc.jsonl"
    data.write_text("\n".join(json.dumps(instances[k]) for k in ("scripted", "own")) + "\n")
    return instances, data


def dataset_style_script(base: str, test_patch: str) -> str:
    """An eval script as SWE-bench's data writes them (compare the dataset's eval_script column)."""
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "source /opt/miniconda3/bin/activate",
        "conda activate testbed", "cd /testbed", "git config --global --add safe.directory /testbed",
        "cd /testbed", "git status", "git show", f"git -c core.fileMode=false diff {base}",
        "source /opt/miniconda3/bin/activate", "conda activate testbed",
        RECIPE["install"][0], f"git checkout {base} tests/test_calc.py",
        f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912",
        ": '>>>>> Start Test Output'", TEST_CMD, ": '>>>>> End Test Output'",
        f"git checkout {base} tests/test_calc.py", ""])


def write_wheel(folder: Path, name: str = "calc-extras", version: str = "1.0",
                code: str = "TWO = 2\n", requires: tuple[str, ...] = (), tag: str = "py3-none-any") -> Path:
    """A pure-Python wheel written by hand (no build tools, no network), tagged `tag`."""
    import base64
    import hashlib
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    path = folder / f"{module}-{version}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + \
        "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{module}.py": code, f"{info}/METADATA": meta,
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for entry, text in files.items():
            wheel.writestr(entry, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{entry},sha256={digest},{len(text.encode())}")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


class JsonIndex:
    """A PEP 691 package index on loopback whose files carry upload times (PEP 700), as PyPI's
    do: what `uv --exclude-newer` filters on. `add(wheel, uploaded)` publishes a wheel."""

    def __init__(self, root: Path) -> None:
        import http.server
        import threading

        self.root, self.files = root, {}
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):  # noqa: N802
                self.do_GET(head=True)

            def do_GET(self, head: bool = False):  # noqa: N802
                import hashlib

                parts = [p for p in self.path.split("/") if p]
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.files:
                    files = [{"filename": w.name, "url": f"/files/{w.name}",
                              "hashes": {"sha256": hashlib.sha256(w.read_bytes()).hexdigest()},
                              "upload-time": uploaded} for w, uploaded in index.files[parts[1]]]
                    body = json.dumps({"meta": {"api-version": "1.1"}, "name": parts[1], "files": files,
                                       "versions": []}).encode()
                    kind = "application/vnd.pypi.simple.v1+json"
                elif len(parts) == 2 and parts[0] == "files" and (index.root / parts[1]).is_file():
                    body, kind = (index.root / parts[1]).read_bytes(), "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def add(self, name: str, version: str, uploaded: str, requires: tuple[str, ...] = (),
            tag: str = "py3-none-any") -> None:
        wheel = write_wheel(self.root, name, version, f"VERSION = {version!r}\n", requires, tag)
        self.files.setdefault(name, []).append((wheel, uploaded))

    def add_sdist(self, name: str, version: str, uploaded: str, files: dict[str, str]) -> None:
        """An sdist NAME-VERSION.tar.gz of `files` (a setup.py among them), published `uploaded`."""
        import io
        import tarfile

        base = f"{name.replace('-', '_')}-{version}"
        path = self.root / f"{base}.tar.gz"
        self.root.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for member, text in sorted({"PKG-INFO": f"Metadata-Version: 1.1\nName: {name}\nVersion: {version}\n",
                                        **files}.items()):
                data = text.encode()
                info = tarfile.TarInfo(f"{base}/{member}")
                info.size, info.mtime = len(data), 1_500_000_000
                tar.addfile(info, io.BytesIO(data))
        path.write_bytes(buffer.getvalue())
        self.files.setdefault(name, []).append((path, uploaded))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class LoopbackInternet:
    """The internet, on this host's loopback: a DNS server at a random 127.x.y.z:53 that answers
    `name` with 127.0.0.1, and an HTTP server on 127.0.0.1 that says `hello`. `resolv_conf` names
    it first and an unroutable nameserver (TEST-NET-1) second: a sandbox sharing the host's
    network resolves `name` at once; one in a namespace of its own finds nothing on its own
    loopback and moves on to the unroutable one, whose packets are dropped unless the sandbox
    makes it unreachable (each lookup would wait 10 s)."""

    def __init__(self, name: str = "internet.orchard.test") -> None:
        import http.server
        import random
        import socket
        import threading

        class Hello(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "5")
                self.end_headers()
                self.wfile.write(b"hello")

        self.name = name
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        self.port = self.http.server_address[1]
        self.dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(20):
            self.address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
            try:
                self.dns.bind((self.address, 53))
                break
            except OSError:
                continue
        self.resolv_conf = f"nameserver {self.address}\nnameserver 192.0.2.53\n"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        threading.Thread(target=self._answer, daemon=True).start()

    def _answer(self) -> None:
        import struct

        while True:
            try:
                query, peer = self.dns.recvfrom(512)
            except OSError:
                return
            labels, i = [], 12
            while i < len(query) and query[i]:
                labels.append(query[i + 1:i + 1 + query[i]].decode(errors="replace"))
                i += 1 + query[i]
            question = query[12:i + 5]
            qtype = struct.unpack("!H", query[i + 1:i + 3])[0]
            known = ".".join(labels).lower() == self.name
            answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1]) \
                if known and qtype == 1 else b""
            flags = 0x8180 if known else 0x8183  # a response; NXDOMAIN for any other name
            reply = query[:2] + struct.pack("!HHHHH", flags, 1, 1 if answer else 0, 0, 0) + question + answer
            self.dns.sendto(reply, peer)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.dns.close()

"""A package index on disk (PEP 503, file://) holding small sdists made here, for pip to use.

Each sdist carries its own PEP 517 backend (`backend-path`), so neither `pip download` (which
prepares the metadata) nor `pip install -e .` needs anything from any index.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import textwrap
from pathlib import Path

BACKEND = '''\
"""A PEP 517 backend in ~40 lines: metadata, wheel and editable wheel of src/."""
import base64, hashlib, os, pathlib, zipfile

NAME, VERSION = {name!r}, {version!r}
DIST = NAME.replace("-", "_") + "-" + VERSION
META = "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n"


def _none(config_settings=None):
    return []


get_requires_for_build_wheel = get_requires_for_build_editable = get_requires_for_build_sdist = _none


def prepare_metadata_for_build_wheel(directory, config_settings=None):
    folder = pathlib.Path(directory) / (DIST + ".dist-info")
    folder.mkdir()
    (folder / "METADATA").write_text(META)
    return folder.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def _wheel(directory, files):
    name = DIST + "-py3-none-any.whl"
    files[DIST + ".dist-info/METADATA"] = META
    files[DIST + ".dist-info/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = DIST + ".dist-info/RECORD"
    lines = []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as zf:
        for path, text in files.items():
            data = text.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(path + ",sha256=" + digest + "," + str(len(data)))
        zf.writestr(record, "\\n".join(lines + [record + ",,"]) + "\\n")
    return name


def build_editable(directory, config_settings=None, metadata_directory=None):
    return _wheel(directory, {{NAME.replace("-", "_") + ".pth": os.path.abspath("src") + "\\n"}})


def build_wheel(directory, config_settings=None, metadata_directory=None):
    src = pathlib.Path("src")
    return _wheel(directory, {{p.relative_to(src).as_posix(): p.read_text() for p in src.rglob("*.py")}})
'''

PYPROJECT = """\
[build-system]
requires = []
build-backend = "tiny_backend"
backend-path = ["."]
"""


def project_files(name: str, version: str, files: dict[str, str]) -> dict[str, str]:
    """A project's files: pyproject.toml, the backend and `files` (what a repository holds)."""
    return {"pyproject.toml": PYPROJECT, "tiny_backend.py": BACKEND.format(name=name, version=version),
            **{path: textwrap.dedent(text) for path, text in files.items()}}


def make_sdist(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """NAME-VERSION.tar.gz with PKG-INFO, pyproject.toml, the backend and `files`."""
    base = f"{name.replace('-', '_')}-{version}"
    content = {"PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
               **project_files(name, version, files)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path in sorted(content):
            data = content[path].encode()
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tf.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{base}.tar.gz"
    archive.write_bytes(buffer.getvalue())
    return archive


def make_index(root: Path, archives: list[Path]) -> str:
    """A PEP 503 'simple' index of `archives` under `root`; returns its file:// URL."""
    by_project: dict[str, list[Path]] = {}
    for archive in archives:
        project = archive.name.split("-")[0].replace("_", "-").lower()
        by_project.setdefault(project, []).append(archive)
    for project, files in by_project.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="{a.as_uri()}#sha256={hashlib.sha256(a.read_bytes()).hexdigest()}">'
                        f"{a.name}</a>\n" for a in files)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return (root / "simple").as_uri()


CALC = {
    "src/tinycalc/__init__.py": '''\
        """A small calculator library, with tests that pin its behaviour."""


        def clamp(value, low, high):
            if value < low:
                return low
            if value > high:
                return high
            return value


        def mean(values):
            if not values:
                raise ValueError("mean of nothing")
            return sum(values) / len(values)


        def chunks(items, size):
            out = []
            for start in range(0, len(items), size):
                out.append(items[start:start + size])
            return out


        def is_even(number):
            return number % 2 == 0 and isinstance(number, int)
        ''',
    "tests/test_calc.py": '''\
        import pytest

        from tinycalc import chunks, clamp, is_even, mean


        def test_clamp_inside():
            assert clamp(5, 0, 10) == 5


        def test_clamp_low():
            assert clamp(-3, 0, 10) == 0


        def test_clamp_high():
            assert clamp(30, 0, 10) == 10


        def test_clamp_edges():
            assert clamp(0, 0, 10) == 0 and clamp(10, 0, 10) == 10


        def test_mean():
            assert mean([1, 2, 3, 6]) == 3


        def test_mean_empty():
            with pytest.raises(ValueError):
                mean([])


        def test_chunks():
            assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


        def test_chunks_exact():
            assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


        @pytest.mark.parametrize("number,expected", [(2, True), (3, False), (0, True), (2.0, False)])
        def test_is_even(number, expected):
            assert is_even(number) is expected
        ''',
}

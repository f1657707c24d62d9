"""How a sandbox runner starts: from its code compiled by the very interpreter that will run it,
else from its source (`local_runner.py`, copied beside it as runner.py).

Compiling the runner's 800 lines costs every sandbox ~15 ms of CPU and leaves ~2.8 MiB in its
interpreter; starting from a marshalled code object costs neither. Marshalled code is only valid
for the interpreter that made it, so the boot program compares the interpreter's cache tag and
bytecode magic number with the ones the code was made by, and compiles the source whenever they
differ (another Python, PyPy, a retargeted /usr/bin/python3) or the code cannot be read. Both
files are written by the host before the sandbox starts, read-only to it.
"""

from __future__ import annotations

import functools
import marshal
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("local_runner.py")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_COMPILE = ("import marshal,sys;m=sys.modules['_frozen_importlib_external'].MAGIC_NUMBER;"
            "c=compile(open(sys.argv[1]).read(),'runner.py','exec',dont_inherit=True,optimize=0);"
            "sys.stdout.buffer.write(sys.implementation.cache_tag.encode()+b'\\n'+m.hex().encode()+b'\\n'"
            "+marshal.dumps(c))")


@dataclass(frozen=True)
class Compiled:
    tag: str
    magic: str
    """hex"""
    code: bytes


def here() -> Compiled:
    """The runner compiled by this interpreter."""
    magic = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER.hex()
    code = compile(SOURCE.read_text(), "runner.py", "exec", dont_inherit=True, optimize=0)
    return Compiled(sys.implementation.cache_tag, magic, marshal.dumps(code))


@functools.lru_cache(maxsize=8)
def _by(python: str, identity: tuple[int, int, int]) -> Compiled | None:
    try:
        done = subprocess.run([python, "-I", "-S", "-c", _COMPILE, str(SOURCE)], capture_output=True,
                              timeout=60, env={"PATH": PATH, "LANG": "C.UTF-8"})
    except (OSError, subprocess.SubprocessError):
        return None
    parts = done.stdout.split(b"\n", 2)
    if done.returncode != 0 or len(parts) != 3 or not parts[2]:
        return None
    return Compiled(parts[0].decode(), parts[1].decode(), parts[2])


def by(python: str) -> Compiled | None:
    """The runner compiled by `python` (a host binary), once per interpreter file; None when it
    cannot (the runner then compiles its source)."""
    try:
        real = os.path.realpath(python)
        st = os.stat(real)
    except OSError:
        return None
    return _by(real, (st.st_ino, st.st_size, int(st.st_mtime)))


def place(folder: Path, compiled: Compiled | None) -> None:
    """runner.py, and runner.bin when there is compiled code, into the sandbox's control folder."""
    (folder / "runner.py").write_bytes(SOURCE.read_bytes())
    if compiled is not None:
        (folder / "runner.bin").write_bytes(compiled.code)


def program(inside: str, compiled: Compiled | None) -> str:
    """The `python -I -S -c` program that starts the runner from `inside` (its ctl.sock the
    first argument after it)."""
    tag, magic = (compiled.tag, compiled.magic) if compiled is not None else ("", "")
    return (
        "import marshal,sys\n"
        "c=None\n"
        "try:\n"
        f" if sys.implementation.cache_tag=={tag!r} and "
        f"sys.modules['_frozen_importlib_external'].MAGIC_NUMBER.hex()=={magic!r}:\n"
        f"  f=open({inside + '/runner.bin'!r},'rb');c=marshal.loads(f.read());f.close()\n"
        "except Exception:\n"
        " c=None\n"
        "if c is None:\n"
        f" f=open({inside + '/runner.py'!r});c=compile(f.read(),'runner.py','exec');f.close()\n"
        "del f\n"
        "exec(c,{'__name__':'__main__','__builtins__':__builtins__})\n")

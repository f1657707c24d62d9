"""A sandbox's host folders made `nosuid,nodev` on the host too.

A command in a sandbox runs as root there when orchard runs as root, and its workspace and /tmp
are folders of the host: a setuid-root program it leaves in them would be one on the host until
the sandbox is destroyed (harmless while ORCHARD_HOME is 0700, but not by design). When orchard
runs as root, each such folder is bind-mounted on itself with nosuid and nodev (two mount(2)
calls, microseconds), so nothing in it can gain privileges from the host's side either; `release`
unmounts it before the folder is removed. As another user there is nothing to guard: files made
in a sandbox then belong to that user.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 2, 4, 32, 4096
MNT_DETACH = 2
_LIBC: list = []


def _libc():
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]


def seal(folder: Path) -> bool:
    """Bind `folder` on itself nosuid,nodev (root only); whether it now is."""
    libc = _libc()
    if os.geteuid() != 0 or libc is None:
        return False
    path = os.fsencode(str(folder))
    if libc.mount(path, path, None, MS_BIND, None) != 0:
        return False
    if libc.mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, None) != 0:
        libc.umount2(path, MNT_DETACH)
        return False
    return True


def release(folder: Path) -> None:
    """Undo `seal` (a lazy unmount: nothing in use can keep it); nothing to do for a plain folder."""
    libc = _libc()
    if libc is not None and os.geteuid() == 0:  # EINVAL for a plain folder (ismount cannot tell a bind on itself)
        libc.umount2(os.fsencode(str(folder)), MNT_DETACH)

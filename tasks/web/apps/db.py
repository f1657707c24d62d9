"""One site's SQLite database: a file in the set's folder, rebuilt per reset from an image (the
bytes of a database built once in memory per fixture and kept), so that a reset is a file write.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

IMAGES_KEPT = 16


def image(schema: str, fill: Callable[[sqlite3.Connection], None]) -> bytes:
    """The bytes of a database file holding `schema` filled by `fill`."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema)
        with conn:
            fill(conn)
        return conn.serialize()
    finally:
        conn.close()


class Images:
    """Built images by fixture key (the last few; rebuilding a missing one takes milliseconds)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, bytes] = OrderedDict()

    def get(self, key: str, build: Callable[[], bytes]) -> bytes:
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key]
        data = self._kept[key] = build()
        while len(self._kept) > IMAGES_KEPT:
            self._kept.popitem(last=False)
        return data


class Database:
    """The site's live database (`path`); callers hold the apps' state lock."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def load(self, data: bytes) -> None:
        """Replace the file with `data` (written beside it, then renamed over it)."""
        self.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(self.path)
        self._conn = sqlite3.connect(self.path, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the database is not loaded (reset first)")
        return self._conn

    def all(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def one(self, sql: str, *params: Any) -> sqlite3.Row | None:
        return self.conn.execute(sql, params).fetchone()

    def run(self, sql: str, *params: Any) -> int:
        """Execute one statement and commit; the new row's id."""
        with self.conn:
            return self.conn.execute(sql, params).lastrowid or 0

    def query(self, sql: str) -> list[list[Any]]:
        """Rows of `sql` over a read-only connection (a write is an error)."""
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA query_only = ON")
            return [list(row) for row in conn.execute(sql).fetchall()]
        finally:
            conn.close()

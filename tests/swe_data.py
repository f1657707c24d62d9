"""Where the real SWE-bench data of this workplace lies (for tests/tasks/test_swe_real.py)."""

from __future__ import annotations

import os


def swe_real_data():
    """The folder holding SWE-bench Verified and the pytest/sphinx mirrors, or None: ORCHARD_SWE_DATA,
    else the checkout's ../shared/data, else the workplace's /work/shared/data (a CI clone may
    live anywhere)."""
    from pathlib import Path

    given = os.environ.get("ORCHARD_SWE_DATA")
    candidates = [Path(given)] if given else [Path(__file__).resolve().parents[2] / "shared" / "data",
                                               Path("/work/shared/data")]
    for folder in candidates:
        mirrors = folder / "mirrors"
        if (folder / "swe-bench-verified.parquet").is_file() and (mirrors / "pytest-dev").is_dir() \
                and (mirrors / "sphinx-doc").is_dir():
            return folder
    return None

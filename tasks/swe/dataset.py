"""Reading SWE-bench-format instances: a local .parquet / .jsonl / .json file or a hub dataset.

The hub path goes through `datasets.load_dataset(id, split=...)` (for users with a hub); our
machines have none, so ORCHARD_SWE_DATA (a folder holding `swe-bench-verified.parquet`,
`swe-bench-lite.parquet`) and explicit files come first. pandas / pyarrow / datasets are
imported only when a file of that kind is read.

Without a hub, huggingface_hub retries each request five times with backoff (about 24 s, not
configurable), so one HEAD request to the endpoint (HF_ENDPOINT, through the usual proxy
variables) comes first (orchard_cli.hub): no HTTP answer within 5 seconds -> one error line that
says how to point at a local file. With HF_HUB_OFFLINE=1 there is no probe: `datasets` reads its
cache, and a miss is reported the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli import hub
from orchard_cli.errors import InfraError, MissingDependencyError, NotFoundError, UsageError
from orchard_cli.hub import hub_offline, hub_unreachable

FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
INSTALL_HINT = "pip install 'orchard-cli[swe]'"


@dataclass
class Dataset:
    """Instances as read, with where they came from and a sha256 of the source."""

    records: list[dict[str, Any]]
    source: str
    sha256: str


def looks_like_file(source: str) -> bool:
    return source.endswith(FILE_SUFFIXES) or os.sep in source and Path(source).exists()


def read_source(source: str, *, split: str = "test", data_file: str | None = None) -> Dataset:
    """A file path, or a hub id; `data_file` is the file name looked for in ORCHARD_SWE_DATA."""
    folder = os.environ.get("ORCHARD_SWE_DATA")
    if data_file and folder and not looks_like_file(source):
        candidate = Path(folder).expanduser() / data_file
        if candidate.is_file():
            return read_file(candidate)
        raise NotFoundError(f"ORCHARD_SWE_DATA={folder} has no {data_file}",
                            hint="put the file there, unset ORCHARD_SWE_DATA, or pass --dataset PATH")
    if looks_like_file(source):
        return read_file(Path(source))
    return read_hub(source, split, data_file=data_file)


def read_file(path: Path) -> Dataset:
    path = path.expanduser()
    if not path.is_file():
        raise NotFoundError(f"no dataset file {str(path)!r}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if path.suffix == ".parquet":
        try:
            import pandas
        except ModuleNotFoundError as exc:
            raise MissingDependencyError("reading .parquet needs pandas and pyarrow",
                                         hint=INSTALL_HINT) from exc
        try:
            frame = pandas.read_parquet(path)
        except ImportError as exc:
            raise MissingDependencyError(f"reading .parquet: {exc}", hint=INSTALL_HINT) from exc
        except Exception as exc:
            raise UsageError(f"{path} is not a readable parquet file: {exc}") from exc
        records = [_plain(row) for row in frame.to_dict(orient="records")]
    elif path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(_text(path).splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{number}: not JSON: {exc.msg}") from exc
    elif path.suffix == ".json":
        try:
            data = json.loads(_text(path))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not JSON: {exc.msg}") from exc
        records = data if isinstance(data, list) else [data]
    else:
        raise UsageError(f"{path}: unknown dataset format; use .parquet, .jsonl or .json")
    return Dataset([normalize(r, str(path)) for r in records], str(path), digest)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not a text dataset (byte {exc.start} is not UTF-8)",
                         hint="pass a SWE-bench-format .jsonl, .json or .parquet file") from None


def local_hint(data_file: str | None) -> str:
    folder = f"a folder holding {data_file}" if data_file else "a folder of .parquet files"
    return f"pass --dataset PATH (a .parquet/.jsonl/.json file) or set ORCHARD_SWE_DATA to {folder}"


def read_hub(dataset_id: str, split: str, *, data_file: str | None = None) -> Dataset:
    try:
        import datasets
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(f"loading {dataset_id!r} from a hub needs 'datasets'",
                                     hint=INSTALL_HINT) from exc
    offline = hub_offline(datasets=True)
    if not offline:
        endpoint = hub.endpoint()
        why = hub_unreachable(endpoint)
        if why is not None:
            raise InfraError(f"cannot load {dataset_id!r}: no hub at {endpoint} ({why})",
                             hint=local_hint(data_file) + " (HF_HUB_OFFLINE=1 reads the datasets cache)")
    try:
        loaded = datasets.load_dataset(dataset_id, split=split)
    except Exception as exc:
        where = "the datasets cache (HF_HUB_OFFLINE is set)" if offline else "the hub"
        raise NotFoundError(
            f"could not load {dataset_id!r} (split {split!r}) from {where}: {exc}".splitlines()[0],
            hint=local_hint(data_file)) from exc
    records = [normalize(dict(row), dataset_id) for row in loaded]
    canonical = "\n".join(json.dumps(r, sort_keys=True, default=str) for r in records)
    return Dataset(records, f"{dataset_id}:{split}", hashlib.sha256(canonical.encode()).hexdigest())


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """numpy / pandas scalars and NaN -> plain Python values."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, float) and value != value:
            value = None
        out[key] = value
    return out


def normalize(record: dict[str, Any], source: str) -> dict[str, Any]:
    """Check the fields every instance needs; decode JSON-encoded lists and objects."""
    if not isinstance(record, dict):
        raise UsageError(f"{source}: an instance is a JSON object, not {type(record).__name__}")
    missing = [k for k in ("instance_id", "repo", "base_commit") if not record.get(k)]
    if not isinstance(record.get("test_patch"), str):  # "" is fine: synthesized tasks have none
        missing.append("test_patch")
    if missing:
        name = record.get("instance_id", "?")
        raise UsageError(f"{source}: instance {name!r} lacks {', '.join(missing)}")
    record = dict(record)
    for key in LIST_FIELDS:
        value = record.get(key)
        if value is None:
            record[key] = []
        elif isinstance(value, str):
            try:
                record[key] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{source}: {record['instance_id']}: {key} is not a JSON list") from exc
        else:
            record[key] = list(value)
    env = record.get("environment")
    if isinstance(env, str) and env.strip():
        try:
            record["environment"] = json.loads(env)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{source}: {record['instance_id']}: 'environment' is not JSON") from exc
    elif not env:
        record.pop("environment", None)
    if record.get("created_at") is not None and not isinstance(record["created_at"], str):
        record["created_at"] = str(record["created_at"])
    record.setdefault("version", "")
    return record


def select(records: list[dict[str, Any]], *, instances: list[str] | None = None,
           repo: str | None = None, limit: int | None = None,
           slice_: str | None = None) -> list[dict[str, Any]]:
    """Filter by ids (order kept as in the data), repository, a 'start:stop' slice, a limit."""
    if instances:
        wanted = list(dict.fromkeys(instances))
        known = {r["instance_id"] for r in records}
        unknown = [i for i in wanted if i not in known]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
            raise UsageError(f"unknown instance id(s): {shown}",
                             hint="list them with `orchard tasks ls SUITE`")
        chosen = set(wanted)
        records = [r for r in records if r["instance_id"] in chosen]
    if repo:
        repos = {r["repo"] for r in records}
        records = [r for r in records if r["repo"] == repo or r["repo"].split("/")[-1] == repo]
        if not records:
            raise UsageError(f"no instance of repository {repo!r}",
                             hint=f"repositories here: {', '.join(sorted(repos))}")
    if slice_:
        records = records[parse_slice(slice_)]
    if limit is not None:
        if limit < 0:
            raise UsageError(f"--limit must be >= 0, not {limit}")
        records = records[:limit]
    return records


def parse_slice(text: str) -> slice:
    """'10:20', ':5', '3:' -> a slice; anything else is a usage error."""
    parts = text.split(":")
    try:
        if len(parts) == 2:
            return slice(*(int(p) if p.strip() else None for p in parts))
        if len(parts) == 3:
            return slice(*(int(p) if p.strip() else None for p in parts))
    except ValueError:
        pass
    raise UsageError(f"bad --slice {text!r}; use START:STOP such as 0:50")

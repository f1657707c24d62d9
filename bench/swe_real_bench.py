"""Gold on real SWE-bench Verified instances, cold and warm: does every one resolve here?

Runs `orchard eval --predictions gold` on every instance of the given datasets (Verified first, then
Lite, each instance once) of the repositories the mirror folder holds (pytest, sphinx, sympy,
requests and pylint here: 249 = 156 Verified + 93 Lite-only instances), first on an empty ORCHARD_HOME
(cold: every environment is built) and then again on the same home (warm: nothing is built), and
prints one report: resolved/total for each run, every instance that did not resolve with its
category and cause, build seconds per environment, grading seconds per instance (median, p90,
max), and the wall time of both runs side by side. `--docker N` grades a sample of N instances
(spread over the environments) on the docker backend as well and lists any verdict that differs.

    .venv/bin/python bench/swe_real_bench.py --mirrors ../shared/data/mirrors \\
        --dataset ../shared/data/swe-bench-verified.parquet --dataset ../shared/data/swe-bench-lite.parquet \\
        [--workers 2] [--docker 6] [--crosscheck PYTHON_WITH_SWEBENCH5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORCHARD = str(Path(sys.executable).with_name("orchard"))


def instances(datasets: list[Path], mirrors: Path, only: list[str]) -> list[dict]:
    """The instances of the mirrored repositories in `datasets`, each once (the first file that
    has it: Verified before Lite), as full records."""
    import pandas as pd

    frame = pd.concat([pd.read_parquet(d) for d in datasets]).drop_duplicates("instance_id")
    held = {f"{o.name}/{r.name.removesuffix('.git')}" for o in mirrors.iterdir() if o.is_dir()
            for r in o.iterdir() if r.is_dir()}
    rows = frame[frame.repo.isin(held)]
    if only:
        rows = rows[rows.repo.isin(only)]
    return rows.to_dict("records")


def write_dataset(chosen: list[dict], path: Path) -> Path:
    """One .jsonl of the chosen instances (the union of the datasets), for one eval run."""
    with path.open("w") as out:
        for row in chosen:
            out.write(json.dumps({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}) + "\n")
    return path


def run_eval(ids: list[str], args: argparse.Namespace, home: Path, out: Path, backend: str,
             predictions: str = "gold") -> float:
    env = {**os.environ, "ORCHARD_HOME": str(home)}
    started = time.monotonic()
    done = subprocess.run(
        [ORCHARD, "eval", "swe-verified", "--dataset", str(args.combined), "--instances", ",".join(ids),
         "--predictions", predictions, "--repo-mirror", str(args.mirrors), "--workers", str(args.workers),
         "--backend", backend, "--max-errors", str(len(ids)), "--out", str(out), "--format", "json", *(["--resume"] if (out / "results.jsonl").is_file() else [])],
        env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if not (out / "results.jsonl").is_file():
        raise SystemExit(f"orchard eval failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return seconds


def rows_of(out: Path) -> dict[str, dict]:
    rows = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["instance_id"]] = row
    return rows


def builds(home: Path) -> list[tuple[str, float]]:
    found = []
    for marker in sorted((home / "swe" / "envs").glob("*/env.json")):
        data = json.loads(marker.read_text())
        found.append((data["key"], float(data.get("build_seconds") or 0)))
    return found


def du(*paths: Path) -> list[int]:
    """Bytes on disk of each path, from one `du` run: a file hard-linked from several of them
    (an environment's packages linked from the uv cache) counts once, at its first path."""
    present = [p for p in paths if p.exists()]
    if not present:
        return [0] * len(paths)
    done = subprocess.run(["du", "-s", "-B1", *map(str, present)], capture_output=True, text=True)
    sizes = {line.split("\t", 1)[1]: int(line.split("\t", 1)[0]) for line in done.stdout.splitlines() if "\t" in line}
    return [sizes.get(str(p), 0) for p in paths]


def disk(home: Path) -> dict:
    """Per environment alone (everything it holds), and all of them with the caches, shared
    files counted once."""
    envs = sorted(p for p in (home / "swe" / "envs").glob("*") if (p / "env.json").is_file())
    alone = {p.name: du(p)[0] for p in envs}
    shared = du(*envs, home / "swe" / "cache", home / "swe" / "opt", home / "swe" / "repos")
    return {"per_env": alone, "envs_total": sum(shared[:len(envs)]), "caches": sum(shared[len(envs):]),
            "total": sum(shared)}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[max(0, int(len(ordered) * 0.9) - 1)]
    return f"median {statistics.median(ordered):6.1f}s  p90 {p90:6.1f}s  max {ordered[-1]:6.1f}s"


def cause(row: dict, out: Path) -> str:
    if row.get("error"):
        return str(row["error"]).splitlines()[0][:160]
    tests = (row.get("tests") or {}).get("counts") or {}
    outcome = out / row.get("log_dir", "") / "outcome.json"
    failing = []
    if outcome.is_file():
        detail = json.loads(outcome.read_text()).get("tests") or {}
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            failing += [f"{kind}:{t}" for t in (detail.get(kind) or {}).get("failure", [])]
    head = ", ".join(failing[:3]) + (f" (+{len(failing) - 3})" if len(failing) > 3 else "")
    return f"{tests} {head}"[:220]


def crosscheck(python: Path, records: dict[str, dict], rows: dict[str, dict], out: Path) -> tuple[int, list[str]]:
    """swebench 5.x's verdict (resolved, and the four test counts) on each log that has test
    output, against orchard's: (logs checked, instances whose verdict or counts differ)."""
    script = Path(__file__).resolve().parent.parent / "tests" / "tasks" / "official5_verdict.py"
    cases, ours = [], []
    for instance_id, row in rows.items():
        log = out / row.get("log_dir", "") / "test_output.txt"
        counts = (row.get("tests") or {}).get("counts")
        if not log.is_file() or not counts:
            continue
        record = records[instance_id]
        cases.append({"instance_id": instance_id, "repo": record["repo"], "version": record["version"],
                      "log_parser": record["log_parser"], "log": log.read_text(errors="replace"),
                      "FAIL_TO_PASS": json.loads(record["FAIL_TO_PASS"]), "PASS_TO_PASS": json.loads(record["PASS_TO_PASS"])})
        ours.append(row)
    done = subprocess.run([str(python), str(script)], input=json.dumps(cases), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"swebench 5.x grading failed: {done.stderr[-800:]}")
    differ = []
    for case, row, official in zip(cases, ours, json.loads(done.stdout)):
        counts, status = row["tests"]["counts"], official.get("tests_status")
        same = bool(row.get("resolved")) == bool(official["resolved"]) and (all(
            counts[f"{k}_{side}"] == len(status[k][side])
            for k in ("FAIL_TO_PASS", "PASS_TO_PASS") for side in ("success", "failure"))
            if status else not row["tests"].get("log_valid", True) or not row["tests"].get("parsed_tests"))
        # (swebench gives no test report when its parser reads no test from the log)
        if not same:
            differ.append(case["instance_id"])
    return len(cases), differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, action="append", required=True,
                        help="a SWE-bench parquet; repeat it (Verified, then Lite: each instance once)")
    parser.add_argument("--repos", default="", help="comma-separated owner/name (default: every mirrored one)")
    parser.add_argument("--instances", default="", help="comma-separated ids (default: all of the mirrored repositories)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", default="cold,warm,empty", help="which of cold, warm, empty to run")
    parser.add_argument("--docker", type=int, default=0, help="also grade this many on docker")
    parser.add_argument("--docker-ids", default="", help="comma-separated instances to add to the docker sample")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--home", type=Path, help="ORCHARD_HOME for the runs (default: a fresh folder)")
    parser.add_argument("--work", type=Path, help="folder of the run folders (default: a fresh one); "
                        "a run folder already there is resumed")
    parser.add_argument("--crosscheck", type=Path, help="a Python with swebench 5.x (--no-deps, and unidiff): "
                        "grade every gold log with swebench's own get_eval_report and list any verdict that differs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    chosen = instances(args.dataset, args.mirrors, [r for r in args.repos.split(",") if r])
    if args.instances:
        wanted = set(args.instances.split(","))
        chosen = [c for c in chosen if c["instance_id"] in wanted]
    if args.limit:
        chosen = chosen[:args.limit]
    if not chosen:
        print("error: no instance of a mirrored repository", file=sys.stderr)
        return 2
    ids = [c["instance_id"] for c in chosen]
    runs = set(args.runs.split(","))
    home = args.home or Path(tempfile.mkdtemp(prefix="orchard-swe-bench-"))
    work = args.work or Path(tempfile.mkdtemp(prefix="orchard-swe-runs-"))
    work.mkdir(parents=True, exist_ok=True)
    args.combined = write_dataset(chosen, work / "instances.jsonl")
    print(f"{len(ids)} instances, home {home}, runs under {work}", file=sys.stderr, flush=True)
    timed: dict[str, float] = {}
    results: dict[str, dict[str, dict]] = {}
    for name, predictions in (("cold", "gold"), ("warm", "gold"), ("empty", "empty")):
        if name in runs:
            timed[name] = run_eval(ids, args, home, work / name, "local", predictions)
            results[name] = rows_of(work / name)
            if name == "cold":
                built, space = builds(home), disk(home)
    if "cold" not in results:
        built, space = builds(home), disk(home)
    first = "cold" if "cold" in results else "warm"  # the gold run the misses and the cross-check read
    cold = results.get(first) or {}
    warm = results.get("warm", {})
    repos = sorted({c["repo"] for c in chosen})
    lines = [f"{len(ids)} real SWE-bench instances ({', '.join(repos)}), local backend, {args.workers} workers", ""]
    lines.append(f"  {'run':<10}{'resolved':>12}{'wall':>12}")
    for name, rows in results.items():
        resolved = sum(1 for r in rows.values() if r.get("resolved"))
        lines.append(f"  {name:<10}{f'{resolved}/{len(ids)}':>12}{timed[name]:>11.0f}s")
    lines += ["", "not resolved (gold):"]
    misses = [(i, cold.get(i, {})) for i in ids if cold and not cold.get(i, {}).get("resolved")]
    for instance_id, row in misses:
        lines.append(f"  {instance_id:<32} {row.get('category', 'missing'):<14} {cause(row, work / first)}")
    if not misses:
        lines.append("  none")
    if warm and first == "cold":  # without a cold run there is nothing to compare the warm one with
        flips = [i for i in ids if bool(cold.get(i, {}).get("resolved")) != bool(warm.get(i, {}).get("resolved"))]
        lines.append(f"cold/warm verdicts that differ: {', '.join(flips) or 'none'}")
    for name, rows in results.items():
        by_category: dict[str, int] = {}
        for row in rows.values():
            by_category[row.get("category", "?")] = by_category.get(row.get("category", "?"), 0) + 1
        lines.append(f"categories ({name}): " + ", ".join(f"{k} {v}" for k, v in sorted(by_category.items())))
    gb = 1e9
    lines += ["", f"environment builds: {len(built)}, {spread([s for _, s in built])}",
              f"disk: environments {space['envs_total'] / gb:.2f} GB, caches {space['caches'] / gb:.2f} GB, "
              f"total {space['total'] / gb:.2f} GB (shared files once) = {space['total'] / gb / len(ids):.3f} GB per instance"]
    for key, seconds in built:
        lines.append(f"  {key:<60} {seconds:7.1f}s {space['per_env'].get(key, 0) / gb:6.2f} GB")
    for name, rows in results.items():
        graded = [float((r.get("tests") or {}).get("seconds") or 0) for r in rows.values() if r.get("tests")]
        episode = [float(r.get("duration_seconds") or 0) for r in rows.values()]
        lines.append(f"tests per instance ({name}): {spread(graded)}")
        lines.append(f"episode per instance ({name}, setup + grading): {spread(episode)}")
    result = {"instances": ids, "seconds": timed, "builds": built, "disk": space,
              **{name: {i: {"category": r.get("category"), "error": r.get("error"),
                            "tests_seconds": (r.get("tests") or {}).get("seconds"),
                            "episode_seconds": r.get("duration_seconds")} for i, r in rows.items()}
                 for name, rows in results.items()}}
    if args.crosscheck and cold:
        checked, differ = crosscheck(args.crosscheck, {c["instance_id"]: c for c in chosen}, cold, work / first)
        lines += ["", f"swebench 5.x's own grading of the {checked} gold logs with test output: "
                      f"verdicts differing from orchard's: {', '.join(differ) or 'none'}"]
        result["crosscheck"] = {"checked": checked, "differ": differ}
    if args.docker or args.docker_ids:
        by_env: dict[str, list[str]] = {}
        for c in chosen:
            by_env.setdefault(f"{c['repo']}@{c['version']}", []).append(c["instance_id"])
        per_repo: dict[str, list[str]] = {}
        for env_name, group in by_env.items():
            per_repo.setdefault(env_name.split("@")[0], []).append(group[0])
        sample = []  # the sample spread over the repositories, and over each one's versions
        for i, repo in enumerate(sorted(per_repo)):
            want = min(args.docker // len(per_repo) + (i < args.docker % len(per_repo)), len(per_repo[repo]))
            sample += [per_repo[repo][int(j * len(per_repo[repo]) / want)] for j in range(want)]
        sample += [i for i in args.docker_ids.split(",") if i and i in ids and i not in sample]
        docker_s = run_eval(sample, args, home, work / "docker", "docker")
        docker = rows_of(work / "docker")
        differ = [i for i in sample if docker.get(i, {}).get("category") != cold.get(i, {}).get("category")]
        resolved = sum(1 for i in sample if docker.get(i, {}).get("resolved"))
        lines += ["", f"docker backend, {len(sample)} instances ({docker_s:.0f}s): resolved {resolved}/{len(sample)}; "
                      f"verdicts differing from local: {', '.join(differ) or 'none'}"]
        result["docker"] = {i: docker.get(i, {}).get("category") for i in sample}
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())

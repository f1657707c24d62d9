#!/usr/bin/env bash
# Run every block of README.md and docs/*.md that needs no model endpoint, as a reader would:
# on a fresh ORCHARD_HOME, in a scratch folder (one per document, so a block can use what the
# previous one wrote), with orchard on PATH. Blocks marked `endpoint` or `skip` are listed, not
# run (see tests/docs_blocks.py for the marks). Prints one line per block and a summary; exit 1
# when a block failed. Minutes to an hour (a whole web-mini and claw-mini validation, RL steps).
#
#   scripts/check-docs.sh [--only README.md] [--timeout 1800] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python - "$@" <<'PY'
import argparse, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, "tests")
from docs_blocks import SHELLS, all_blocks  # noqa: E402

parser = argparse.ArgumentParser(prog="check-docs.sh")
parser.add_argument("--only", help="one document (README.md, docs/web.md)")
parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per block")
parser.add_argument("--keep", action="store_true", help="keep the scratch folders and logs")
args = parser.parse_args()
root = Path.cwd()
scratch = Path(tempfile.mkdtemp(prefix="orchard-docs-"))
env = {**os.environ, "ORCHARD_HOME": str(scratch / "home"), "PATH": f"{root / '.venv' / 'bin'}:{os.environ['PATH']}"}
env.pop("ORCHARD_ENV_URL", None)
rows, failed = [], 0
for block in all_blocks():
    if block.lang not in SHELLS or not block.commands:
        continue
    where = block.where
    if args.only and not where.startswith(args.only):
        continue
    if block.mark in ("endpoint", "skip", ""):
        rows.append((where, block.mark or "unmarked", "not run", 0.0, block.reason or ""))
        print(f"{where:<22} {block.mark or 'unmarked':<12} not run  {block.reason}", flush=True)
        continue
    script = "\n".join(block.commands) if block.mark == "orchard-only" else block.text
    cwd = scratch / Path(where.split(":")[0]).stem
    cwd.mkdir(exist_ok=True)
    log = scratch / f"{where.replace('/', '_').replace(':', '_')}.log"
    started = time.monotonic()
    try:
        with log.open("w") as out:
            code = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=args.timeout).returncode
    except subprocess.TimeoutExpired:
        code = 124
    seconds = time.monotonic() - started
    status = "ok" if code == 0 else f"FAILED ({code})"
    failed += code != 0
    tail = "" if code == 0 else log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    rows.append((where, block.mark, status, seconds, tail[0] if tail else ""))
    print(f"{where:<22} {block.mark:<12} {status:<8} {seconds:7.1f} s  {tail[0] if tail else ''}", flush=True)
ran = [r for r in rows if r[2] != "not run"]
print(f"\n{len(ran)} block(s) run, {failed} failed, {len(rows) - len(ran)} not run (endpoint/skip); "
      f"load average {open('/proc/loadavg').read().split()[0]}; logs in {scratch}" if args.keep or failed else
      f"\n{len(ran)} block(s) run, {failed} failed, {len(rows) - len(ran)} not run (endpoint/skip); "
      f"load average {open('/proc/loadavg').read().split()[0]}")
if not (args.keep or failed):
    shutil.rmtree(scratch, ignore_errors=True)
sys.exit(1 if failed else 0)
PY

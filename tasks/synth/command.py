"""`orchard tasks synth --family swe` (the default): bugs injected into real packages, as the
synth command's synthesizer (orchard_cli/synthesis.py)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from orchard_cli.errors import UsageError
from orchard_cli.synthesis import SynthRequest, SynthResult


class SWESynthesizer:
    family = "swe"
    writes = "file"
    unit = "package"

    def templates(self) -> None:
        return None

    def describe(self) -> list[dict[str, str]]:
        return []

    def check(self, request: SynthRequest) -> None:
        options = request.options
        if not (options.get("packages") or options.get("from_repo")) or request.out is None:
            raise UsageError("SWE tasks need --package NAME==VERSION (or --from-repo PATH --commit SHA) and "
                             "--out FILE.jsonl (or --family claw --out-dir DIR)")
        if bool(options.get("from_repo")) != bool(options.get("commit")):
            raise UsageError("--from-repo and --commit go together: --from-repo PATH --commit SHA")
        from orchard_cli.preflight import Endpoint, check_endpoints

        # the writer answers, before any build
        check_endpoints([Endpoint("--base-url", options.get("base_url") or "", options.get("writer_model"))])

    def run(self, request: SynthRequest, say: Callable[[str], None],
            on_task: Optional[Callable[[Any], None]] = None) -> SynthResult:
        from orchard_cli.tasks.synth.synth import SynthConfig, refusals, synthesize, write_suite

        options = {k: v for k, v in request.options.items() if v is not None}
        config = SynthConfig(packages=options.pop("packages", None) or [], n=request.n, seed=request.seed,
                             backend=request.backend, **options,
                             **({"jobs": request.workers} if request.workers else {}))
        tasks, report = synthesize(config, say=say)
        if tasks:
            write_suite(tasks, request.out)
            report.out = str(request.out)
        dumped = report.model_dump()
        dropped = {f"{p['package']}=={p['version']}": p["refused"] for p in dumped["packages"] if p["refused"]}
        return SynthResult(report=dumped, kept=report.tasks, dropped=dropped, summary=render(dumped),
                           failure=refusals(report))


def render(report: dict[str, Any]) -> list[Any]:
    """The packages table and the mutation kinds table."""
    from rich.table import Table

    from orchard_cli.tasks.synth.mutate import KINDS

    table = Table(title=f"{report['tasks']} tasks -> {report['out'] or 'nothing written'} (seed {report['seed']}, "
                        f"{report['seconds']:.0f} s)", title_justify="left")
    for column in ("package", "tests", "tried", "kept", "rejected", "seconds"):
        table.add_column(column, justify="left" if column in ("package", "rejected", "seconds") else "right")
    for p in report["packages"]:
        rejected = "\n".join(f"{k} {v}" for k, v in sorted(p["rejected"].items())) or "-"
        seconds = "\n".join(f"{k} {v:g}" for k, v in p["seconds"].items())
        kept = f"{p['kept']}/{p['wanted']}" if not p["refused"] else "refused"
        table.add_row(f"{p['package']}=={p['version']}", f"{p['tests']}\n({p['flaky']} flaky)",
                      str(p["tried"]), kept, rejected, seconds)
    kinds = Table(title="kept / tried by mutation kind", title_justify="left")
    kinds.add_column("kind")
    for p in report["packages"]:
        kinds.add_column(p["package"], justify="right")
    for kind in KINDS:
        kinds.add_row(kind, *(f"{p['kinds'][kind]['kept']}/{p['kinds'][kind]['tried']}"
                              for p in report["packages"]))
    return [table, kinds]

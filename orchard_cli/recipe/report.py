"""The recipe's report: DIR/report.md, report.html, report.png and report.json, from the stage
records and the eval runs' own scorecards and results (nothing is re-run).

It says: per stage its time, tokens and cost, and its command line; per arm (base, SFT, the
control, SFT + RL, the teacher) and held-out set (unseen seeds of the training templates, held-out
templates) the resolved rate, pass@k and pass^k, and the rate per category; the decoding used;
McNemar's exact test between the base and the student (and between the control and the student);
RL's held-out curve and its shuffled-reward control.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from orchard_cli.recipe.context import SET_LABELS, Ctx
from orchard_cli.recipe.stages_eval import ARM_LABELS, ARMS
from orchard_cli.recipe.stats import paired
from orchard_cli.records import write_json, write_text

Table = tuple[list[str], list[list[str]]]


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _card(out: str) -> dict[str, Any]:
    from orchard_cli.runs import RunFolder

    return RunFolder(out).read_scorecard()


def collect(ctx: Ctx) -> dict[str, Any]:
    """Everything the report shows, as data (report.json)."""
    config, records = ctx.config, ctx.records
    arms: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        record = records.get(f"eval-{arm}")
        if record is None or record.status != "finished":
            continue
        arms[arm] = {}
        for name, result in record.result.items():
            card = _card(result["out"])
            categories = {k: {"resolved": v.get("resolved"), "total": v.get("total"), "rate": v.get("resolved_rate")}
                          for k, v in ((card.get("by_group") or {}).get("category") or {}).items()}
            arms[arm][name] = {**result, "categories": categories, "mean_score": card.get("mean_score")}
    tests: dict[str, Any] = {}
    for first, second in (("base", "student"), ("control", "student"), ("near-miss", "student"), ("student", "rl")):
        for name in ctx.eval_sets():
            if name in arms.get(first, {}) and name in arms.get(second, {}):
                tests[f"{first}->{second}:{name}"] = {
                    "first": first, "second": second, "set": name,
                    **paired(Path(arms[first][name]["out"]), Path(arms[second][name]["out"]))}
    stages = [{"name": r.name, "status": r.status, "seconds": round(r.seconds, 1), "tokens_in": r.tokens_in,
               "tokens_out": r.tokens_out, "cost_usd": r.cost_usd, "commands": r.commands}
              for r in records.values() if r.name != "report"]
    synth = records.get("synth")
    return {"schema_version": 1, "family": config.family, "harness": config.harness,
            "teacher": config.distill.teacher, "student": config.student, "out": str(ctx.folder.root),
            "templates": synth.result.get("templates") if synth else {},
            "tasks": synth.result.get("kept") if synth else {},
            "decoding": {"temperature": config.eval.temperature, "max_reply_tokens": config.eval.max_reply_tokens,
                         "max_turns": config.eval.max_turns, "timeout_seconds": config.eval.timeout,
                         "attempts": config.eval.attempts},
            "train": records["student"].result if "student" in records else {},
            "distill": records["distill"].result if "distill" in records else {},
            "rl": records["rl"].result if "rl" in records else {},
            "arms": arms, "tests": tests, "stages": stages,
            "total_seconds": round(sum(s["seconds"] for s in stages), 1)}


def _tables(data: dict[str, Any]) -> list[tuple[str, Table | str]]:
    arms, sets = data["arms"], [s for s in SET_LABELS if any(s in a for a in data["arms"].values())]
    out: list[tuple[str, Table | str]] = []
    rows = []
    for arm, by_set in arms.items():
        for name in sets:
            r = by_set.get(name)
            if r is None:
                continue
            pk = ", ".join(f"@{k} {pct(v)}" for k, v in (r.get("pass_at_k") or {}).items()) or "-"
            hk = ", ".join(f"^{k} {pct(v)}" for k, v in (r.get("pass_hat_k") or {}).items()) or "-"
            rows.append([ARM_LABELS[arm], SET_LABELS[name], f"{r['resolved']}/{r['total']}", pct(r["rate"]), pk, hk,
                         str(r["errors"])])
    out.append(("Results", (["arm", "held-out set", "resolved", "rate", "pass@k", "pass^k", "errors"], rows)))
    for name in sets:
        categories = sorted({c for a in arms.values() for c in (a.get(name) or {}).get("categories", {})})
        present = [a for a in arms if name in arms[a]]
        if not categories or not present:
            continue
        rows = []
        for category in categories:
            cells = []
            for arm in present:
                c = arms[arm][name]["categories"].get(category)
                cells.append(f"{c['resolved']}/{c['total']}" if c else "-")
            rows.append([category, *cells])
        out.append((f"Per category, {SET_LABELS[name]}", (["category", *(ARM_LABELS[a] for a in present)], rows)))
    rows = [[f"{ARM_LABELS[t['first']]} vs {ARM_LABELS[t['second']]}", SET_LABELS[t["set"]], str(t["pairs"]),
             f"{pct(t['first_rate'])} -> {pct(t['second_rate'])}", str(t["only_first"]), str(t["only_second"]),
             f"{t['p_value']:.2g}"] for t in data["tests"].values()]
    if rows:
        out.append(("Paired test (McNemar, exact, two-sided)",
                    (["arms", "held-out set", "pairs", "rate", "only first", "only second", "p"], rows)))
    for name, run in (data.get("rl") or {}).items():
        curve = ", ".join(f"step {e['step']}: {e['mean_reward']:.3f}" for e in run.get("evals") or []) or "-"
        out.append((f"RL ({'shuffled-reward control' if name == 'control' else 'from the SFT checkpoint'})",
                    f"{run.get('steps')} steps, {run.get('episodes')} episodes; training mean reward "
                    f"{run.get('first_mean_reward')} at step 1 -> {run.get('last_mean_reward')}; held-out curve: {curve}"))
    rows = [[s["name"], f"{s['seconds']:.0f}", f"{s['tokens_in']:,} / {s['tokens_out']:,}",
             "unknown" if s["cost_usd"] is None else f"${s['cost_usd']:.4f}", "<br>".join(s["commands"]) or "-"]
            for s in data["stages"]]
    out.append(("Stages", (["stage", "seconds", "tokens in / out", "cost", "command"], rows)))
    return out


def _headline(data: dict[str, Any]) -> list[str]:
    d = data["decoding"]
    decoding = "greedy" if d["temperature"] == 0 else f"temperature {d['temperature']:g}"
    tasks = ", ".join(f"{k} {v}" for k, v in (data["tasks"] or {}).items())
    lines = [f"Family {data['family']}, harness {data['harness']}, teacher {data['teacher']}, student "
             f"{data['student']}; training templates {', '.join(data['templates'].get('train') or []) or 'all'}"
             + (f"; held-out templates {', '.join(data['templates']['unseen'])}" if data["templates"].get("unseen") else "")
             + f"; tasks {tasks}.",
             f"Decoding: {decoding}, replies capped at "
             f"{d['max_reply_tokens']} tokens, at most {d['max_turns']} turns and {d['timeout_seconds']:g} s per episode, "
             f"{d['attempts']} attempt(s) per task.",
             f"Wall time of the stages: {data['total_seconds'] / 60:.1f} min."]
    test = data["tests"].get("base->student:heldout")
    if test:
        lines.insert(0, f"**The student resolves {pct(test['second_rate'])} of the held-out seeds, the base "
                        f"{pct(test['first_rate'])}** ({test['pairs']} paired attempts; McNemar exact p = "
                        f"{test['p_value']:.2g}).")
    return lines


def markdown(data: dict[str, Any]) -> str:
    parts = [f"# orchard recipe {data['family']}: {data['out']}", "", *(f"{line}\n" for line in _headline(data)),
             "![held-out rates](report.png)", ""]
    for title, body in _tables(data):
        parts += [f"## {title}", ""]
        if isinstance(body, str):
            parts += [body, ""]
            continue
        head, rows = body
        parts += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        parts += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows] + [""]
    return "\n".join(parts)


def page(data: dict[str, Any]) -> str:
    body = [f"<h1>orchard recipe {html.escape(data['family'])}</h1>",
            *(f"<p>{html.escape(line).replace('**', '')}</p>" for line in _headline(data)),
            '<img src="report.png" alt="held-out rates">']
    for title, content in _tables(data):
        body.append(f"<h2>{html.escape(title)}</h2>")
        if isinstance(content, str):
            body.append(f"<p>{html.escape(content)}</p>")
            continue
        head, rows = content
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{'<br>'.join(html.escape(x) for x in c.split('<br>'))}</td>" for c in row)
                      + "</tr>" for row in rows)
        body.append(f"<table><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
             "text-align:left;vertical-align:top;font-size:13px}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>orchard recipe</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>")


def plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    arms = list(data["arms"])
    sets = [s for s in SET_LABELS if any(s in data["arms"][a] for a in arms)]
    if not arms or not sets:
        return False
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    width = 0.8 / len(arms)
    colors = {"base": "#adb5bd", "student": "#1f77b4", "control": "#ff7f0e", "near-miss": "#d62728", "rl": "#2ca02c", "teacher": "#6c757d"}
    for i, arm in enumerate(arms):
        xs = [j + i * width for j in range(len(sets))]
        ys = [(data["arms"][arm].get(s) or {}).get("rate", 0.0) * 100 for s in sets]
        ax.bar(xs, ys, width, label=ARM_LABELS[arm], color=colors.get(arm))
    ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(sets))], [SET_LABELS[s] for s in sets])
    ax.set_ylabel("resolved (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"orchard recipe {data['family']}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_report(ctx: Ctx) -> dict[str, Any]:
    data = collect(ctx)
    root = ctx.folder.root
    write_json(root / "report.json", data)
    write_text(root / "report.md", markdown(data))
    write_text(root / "report.html", page(data))
    data["plot"] = plot(data, root / "report.png")
    json.dumps(data)  # report.json must stay plain JSON
    return data

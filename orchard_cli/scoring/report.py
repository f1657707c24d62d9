"""Scorecards for people: Markdown, and one self-contained HTML page (inline CSS and SVG, no
scripts, nothing fetched) that opens from disk or a CI artifact."""

from __future__ import annotations

import datetime as _dt
import io
from html import escape
from pathlib import Path

from orchard_cli.outcome import category_info
from orchard_cli.scoring.scorecard import AttemptResult, RepoScore, Scorecard
from orchard_cli.scoring.tables import GROUP_TITLES, Table, check_tables, group_tables, pct


def color(card: Scorecard, category: str) -> str:
    return category_info(category, card.categories).color


def label(card: Scorecard, category: str) -> str:
    return category_info(category, card.categories).label


def main_grouping(card: Scorecard) -> tuple[str, dict[str, RepoScore]]:
    """(title, scores) of the grouping shown first: the family's first, else by repository; a
    family without groupings (quiz: capitals) is shown as its suite, not as 'repository (none)'."""
    if card.by_group:
        name = "repo" if "repo" in card.by_group else next(iter(card.by_group))
        return GROUP_TITLES.get(name, name), card.by_group[name]
    if set(card.by_repo) == {"(none)"}:
        return "suite", {card.suite: card.by_repo["(none)"]}
    return "repository", card.by_repo


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def cost_text(card: Scorecard) -> str:
    if card.tokens is None:
        return "no model ran"
    return f"${card.cost_usd:.4f}" if card.cost_usd is not None else "unknown (no price for this model)"


def tests_summary(tests: dict) -> str:
    """'F2P 1/1 · P2P 40/40' from SWE counts, or the family's own 'summary'."""
    if isinstance(tests.get("summary"), str):
        return tests["summary"]
    counts = tests.get("counts")
    if not isinstance(counts, dict):
        return ""
    parts = []
    for key, short in (("FAIL_TO_PASS", "F2P"), ("PASS_TO_PASS", "P2P")):
        ok, bad = counts.get(f"{key}_success", 0), counts.get(f"{key}_failure", 0)
        if ok or bad:
            parts.append(f"{short} {ok}/{ok + bad}")
    return " · ".join(parts)


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def incomplete_note(card: Scorecard) -> str | None:
    """None for a finished run; else what is missing, so a partial count never reads as a score."""
    if card.complete:
        return None
    selected = card.total + card.missing
    return (f"run incomplete: {card.total} of {selected} selected attempt(s) finished, {card.missing} "
            f"never ran; the rate below is over the finished ones only (finish it with --resume)")


def benchmark_lead(card: Scorecard) -> str | None:
    """The benchmark's own headline as its leaderboard reports it (Claw-Eval: Pass^3 with three
    attempts, then pass@3 and its mean score); None when the family reports no verdict of its own."""
    bench = card.benchmark
    if bench is None:
        return None
    name, k = bench.name or "the benchmark", bench.lead_k
    if k > 1:
        line = (f"{name} Pass^{k} {pct(bench.lead)} (tasks passing all {k} attempts) | "
                f"pass@{k} {pct((bench.pass_at_k or {}).get(k))}")
    else:
        line = f"{name} pass rate {pct(bench.lead)} ({bench.passed}/{card.total} attempts)"
    if bench.mean_score is not None:
        line += f" | mean score {bench.mean_score:.3f}"
    return line


def strict_beside(card: Scorecard) -> str:
    """orchard's strict verdict, said beside a benchmark's own headline."""
    return f"orchard's strict verdict: resolved {card.resolved}/{card.total} ({pct(card.resolved_rate)})"


# ---- Markdown ----------------------------------------------------------------------------------

def render_markdown(card: Scorecard, results: list[AttemptResult] | None = None) -> str:
    r = card.reproducibility
    incomplete = incomplete_note(card)
    headline = (f"**Resolved: {card.resolved} / {card.total} = {pct(card.resolved_rate)}** (headline: over all "
                f"attempts; env/infra errors count as not resolved)")
    if incomplete:
        headline = (f"**Run incomplete: {card.missing} of {card.total + card.missing} selected attempt(s) never "
                    f"ran.** Resolved so far: {card.resolved} / {card.total} finished = "
                    f"{pct(card.resolved_rate)} (not a score of the suite; finish it with --resume)")
    lead = benchmark_lead(card)
    if lead:  # the benchmark's leaderboard metric first, orchard's strict verdict beside it
        headline = (f"**{lead}** (its own verdict; attempts lost to env/infra errors count as not passed)\n\n"
                    f"{headline.replace('**Resolved:', '**Orchard strict, resolved:', 1)}")
    lines = [
        f"# orchard eval: {card.suite}",
        "",
        headline,
        "",
        "| metric | value |", "| --- | --- |",
        f"| source | {card.source} |",
        f"| instances | {card.instances} |",
        f"| attempts per instance | {card.attempts} |",
        f"| resolved | {card.resolved} |",
        f"| resolved rate (all) | {pct(card.resolved_rate)} |",
        f"| resolved rate (graded only) | {pct(card.resolved_rate_graded)} |",
        *([f"| check score (all) | {pct(card.mean_score)} |",
           f"| check score (graded only) | {pct(card.mean_score_graded)} |"] if card.mean_score is not None else []),
        f"| errors (env / infra) | {card.errors} ({card.by_category['env_error']} env, "
        f"{card.by_category['infra_error']} infra) |",
        f"| wall time | {duration(card.wall_seconds)} |",
        f"| tokens | {'-' if card.tokens is None else f'{card.tokens.input} in / {card.tokens.output} out'} |",
        f"| cost | {cost_text(card)} |",
    ]
    if not card.complete:
        lines.append(f"| missing (run interrupted) | {card.missing} |")
    lines += ["", "## Outcomes", "", "| category | count |", "| --- | ---: |"]
    lines += [f"| {c} | {n} |" for c, n in card.by_category.items()]
    for table in group_tables(card):
        lines += _markdown_table(table)
    if card.pass_at_k:
        lines += ["", "## pass@k and pass^k (unbiased estimators)", "", "| k | pass@k | pass^k |",
                  "| ---: | ---: | ---: |"]
        lines += [f"| {k} | {pct(v)} | {pct((card.pass_hat_k or {}).get(k))} |"
                  for k, v in card.pass_at_k.items()]
    for table in check_tables(card):
        lines += _markdown_table(table)
    if results:
        lines += ["", "## Instances", "", "| instance | attempt | outcome | tests | seconds | patch bytes | error |",
                  "| --- | ---: | --- | --- | ---: | ---: | --- |"]
        lines += [f"| {x.instance_id} | {x.attempt} | {x.category} | {tests_summary(x.tests)} | "
                  f"{x.duration_seconds:.1f} | {x.patch_bytes} | {(x.error or '').replace('|', '/')} |"
                  for x in results]
    lines += ["", "## Reproducibility", "",
              f"- orchard {r.orchard_version}; harness {r.harness or '-'} {r.harness_version or ''}".rstrip(),
              f"- dataset sha256: `{r.dataset_sha256 or '-'}`", f"- seed: {'-' if r.seed is None else r.seed}",
              "- configuration: see `config.json`", ""]
    return "\n".join(lines)


def _markdown_table(table: Table) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "/")

    return (["", f"## {table.title}", "", "| " + " | ".join(map(cell, table.headers)) + " |",
             "| " + " | ".join("---:" if n else "---" for n in table.numeric) + " |"]
            + ["| " + " | ".join(map(cell, row)) + " |" for row in table.rows]
            + ([] if not table.note else ["", f"_{table.note}_"]))


# ---- HTML --------------------------------------------------------------------------------------

CSS = """
:root{--fg:#1d2430;--muted:#667085;--line:#e4e7ec;--bg:#f6f7f9;--card:#fff}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 28px 48px}
header h1{font-size:22px;margin:0 0 4px}header p{margin:0;color:var(--muted)}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:14px;margin:22px 0}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px}
.tile .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.tile .v{font-size:26px;font-weight:650;margin-top:2px}.tile .s{color:var(--muted);font-size:12px}
.tile.head{border-color:#2f9e62;box-shadow:inset 4px 0 0 #2f9e62}.tile.bad .v{color:#c23b3b}
.grid{display:grid;grid-template-columns:1.35fr 1fr;gap:14px;align-items:start}
@media(max-width:900px){.grid{grid-template-columns:1fr}}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin-top:14px}
section h2{font-size:15px;margin:0 0 10px}svg text{font-family:inherit}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;white-space:nowrap}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.pill{display:inline-block;padding:1px 8px;border-radius:99px;color:#fff;font-size:12px;white-space:nowrap}
.note{color:var(--muted);font-size:12px;margin-top:8px}code{font-size:12px}
td.id,td.t{white-space:nowrap}.badge{display:inline-block;margin-left:6px;padding:0 6px;border-radius:4px;
background:#e7f5ee;color:#2f9e62;font-size:11px;text-transform:none;letter-spacing:0}
.err{color:#a7333a;font-size:12px;word-break:break-word}
.shots{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:12px}
.shots figure{margin:0}.shots img{width:100%;border:1px solid var(--line);border-radius:6px}
.shots figcaption{font-size:12px;color:var(--muted);margin-top:4px}
"""


def _bar_chart_groups(card: Scorecard) -> str:
    title, scores = main_grouping(card)
    rows = list(scores.items())
    width, label_w, right_w, row_h = 640, 190, 110, 30
    bar_w = width - label_w - right_w
    height = 28 + row_h * max(1, len(rows))
    out = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" '
           f'aria-label="Resolved rate by {escape(title)}">']
    for tick in (0, 25, 50, 75, 100):
        x = label_w + bar_w * tick / 100
        out.append(f'<line x1="{x:.1f}" y1="4" x2="{x:.1f}" y2="{height - 22}" stroke="#e4e7ec"/>'
                   f'<text x="{x:.1f}" y="{height - 6}" font-size="11" fill="#667085" '
                   f'text-anchor="middle">{tick}%</text>')
    for i, (name, s) in enumerate(rows):
        y = 6 + i * row_h
        label = name if len(name) <= 28 else name[:27] + "…"
        out.append(f'<text x="{label_w - 10}" y="{y + 15}" font-size="12" text-anchor="end" '
                   f'fill="#1d2430">{escape(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{bar_w}" height="18" rx="3" fill="#eef0f3"/>')
        x = float(label_w)
        for part, fill in ((s.resolved, color(card, "resolved")), (s.errors, color(card, "env_error"))):
            w = bar_w * part / s.total if s.total else 0
            if w > 0:
                out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="18" fill="{fill}"/>')
            x += w
        out.append(f'<text x="{label_w + bar_w + 10}" y="{y + 15}" font-size="12" fill="#1d2430">'
                   f'<tspan font-weight="600">{pct(s.resolved_rate)}</tspan>'
                   f'<tspan fill="#667085"> {s.resolved}/{s.total}</tspan></text>')
    out.append("</svg>")
    return "".join(out)


def _bar_chart_categories(card: Scorecard) -> str:
    width, label_w, row_h = 420, 150, 28
    bar_w = width - label_w - 60
    top = max(1, max(card.by_category.values(), default=0))
    height = 8 + row_h * len(card.by_category)
    out = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="Outcomes">']
    for i, (cat, n) in enumerate(card.by_category.items()):
        y = 4 + i * row_h
        w = bar_w * n / top
        out.append(f'<text x="{label_w - 10}" y="{y + 15}" font-size="12" text-anchor="end" '
                   f'fill="{"#1d2430" if n else "#98a2b3"}">{escape(label(card, cat))}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{max(w, 2 if n else 0):.1f}" height="16" '
                   f'rx="3" fill="{color(card, cat)}"/>')
        out.append(f'<text x="{label_w + w + 8:.1f}" y="{y + 15}" font-size="12" '
                   f'fill="{"#1d2430" if n else "#98a2b3"}" data-category="{cat}">{n}</text>')
    out.append("</svg>")
    return "".join(out)


def _tile(key: str, value: str, sub: str = "", *, ident: str = "", data: str = "", cls: str = "") -> str:
    attrs = (f' id="{ident}"' if ident else "") + (f' data-value="{data}"' if data else "")
    badge = '<span class="badge">headline</span>' if "head" in cls else ""
    return (f'<div class="tile {cls}"><div class="k">{escape(key)}{badge}</div>'
            f'<div class="v"{attrs}>{escape(value)}</div><div class="s">{sub}</div></div>')


def _instances_table(card: Scorecard, results: list[AttemptResult]) -> str:
    patches = any(x.patch_bytes for x in results) or not any(x.checks for x in results)  # claw: no patches
    rows = []
    for x in results:
        tests = tests_summary(x.tests)
        name = f"<code>{escape(x.instance_id)}</code>"
        if x.log_dir:  # the episode's own folder: evidence, verdict, test output, screenshots
            name = f"<a href='{escape(x.log_dir)}/'>{name}</a>"
        rows.append(
            f"<tr><td class='id'>{name}</td><td class='n'>{x.attempt}</td>"
            f"<td><span class='pill' style='background:{color(card, x.category)}'>{escape(label(card, x.category))}</span></td>"
            f"<td class='t'>{escape(tests)}</td><td class='n'>{x.duration_seconds:.1f}s</td>"
            + (f"<td class='n'>{x.patch_bytes}</td>" if patches else "")
            + f"<td class='err'>{escape(x.error or '')}</td></tr>")
    return ("<table><thead><tr><th>instance</th><th class='n'>attempt</th><th>outcome</th><th>tests</th>"
            "<th class='n'>time</th>" + ("<th class='n'>patch bytes</th>" if patches else "") + "<th>error</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


THUMB_WIDTH = 480
MAX_INLINE_BYTES = 300_000


def thumbnail(path: Path | None) -> str | None:
    """A screenshot as a data URL, so the page keeps it wherever it is copied: a JPEG thumbnail
    (Pillow, which the default install has), else the PNG itself when small; None otherwise."""
    import base64

    if path is None or not path.is_file():
        return None
    try:
        from PIL import Image

        with Image.open(path) as image:
            image = image.convert("RGB")
            if image.width > THUMB_WIDTH:
                image = image.resize((THUMB_WIDTH, max(1, round(image.height * THUMB_WIDTH / image.width))))
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=72)
        return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    except ImportError:
        data = path.read_bytes()
        return "data:image/png;base64," + base64.b64encode(data).decode() if len(data) <= MAX_INLINE_BYTES else None
    except (OSError, ValueError):
        return None


def _screenshots(card: Scorecard, results: list[AttemptResult], root: Path | None = None) -> str:
    """The last page of each attempt that did not resolve (web families), as the episode left it:
    a thumbnail inside the page (it survives the page being copied alone), linking the full file."""
    shots = [x for x in results if x.screenshot and not x.resolved]
    if not shots:
        return ""
    figures = "".join(
        f"<figure><a href='{escape(x.screenshot)}'><img src='{escape(thumbnail(root / x.screenshot if root else None) or x.screenshot)}' loading='lazy' "
        f"alt='last page of {escape(x.instance_id)}'></a><figcaption><code>{escape(x.instance_id)}</code> "
        f"#{x.attempt} <span class='pill' style='background:{color(card, x.category)}'>"
        f"{escape(label(card, x.category))}</span></figcaption></figure>" for x in shots)
    return (f"<section id='screenshots'><h2>Last page of unresolved attempts</h2><div class='shots'>{figures}</div>"
            "<p class='note'>The browser's current tab when the episode ended (its log folder keeps it).</p></section>")


def _html_table(table: Table, *, folded: bool = False) -> str:
    def cls(i: int) -> str:
        return " class='n'" if table.numeric[i] else ""

    head = "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(table.headers))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                   for row in table.rows)
    html = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if folded:
        html = f"<details><summary>{len(table.rows)} row(s) (show)</summary>{html}</details>"
    note = f"<p class='note'>{escape(table.note[:1].upper() + table.note[1:])}.</p>" if table.note else ""
    return f"<section id='{escape(table.ident)}'><h2>{escape(table.title)}</h2>{html}{note}</section>"


def render_html(card: Scorecard, results: list[AttemptResult] | None = None, root: Path | None = None) -> str:
    """The scorecard page. `root`: the run folder (screenshots are read from it and put inside
    the page; instance rows link to their log folders)."""
    r = card.reproducibility
    errors_cls = "bad" if card.errors else ""
    bench = card.benchmark
    lead_tiles = [] if bench is None else [
        _tile(f"{bench.name or 'benchmark'} Pass^{bench.lead_k}" if bench.lead_k > 1 else f"{bench.name or 'benchmark'} pass rate",
              pct(bench.lead), f"its leaderboard's metric; {bench.passed} of {card.total} attempts passed",
              ident="benchmark-lead", data=f"{bench.lead:.6f}", cls="head"),
        *([_tile(f"pass@{bench.lead_k}", pct((bench.pass_at_k or {}).get(bench.lead_k)), "any attempt passes",
                 ident="benchmark-pass-at-k")] if bench.lead_k > 1 else []),
        *([_tile("Mean score", f"{bench.mean_score:.3f}", f"{escape(bench.name or 'the benchmark')}'s own score",
                 ident="benchmark-mean-score")] if bench.mean_score is not None else [])]
    tiles = "".join([
        *lead_tiles,
        _tile("Resolved" if bench is None else "Orchard strict", pct(card.resolved_rate),
              f'<span id="resolved" data-value="{card.resolved}">{card.resolved}</span> of '
              f'<span id="total" data-value="{card.total}">{card.total}</span> resolved',
              ident="resolved-rate", data=f"{card.resolved_rate:.6f}", cls="head" if bench is None else ""),
        _tile("Graded only", pct(card.resolved_rate_graded), f"{card.graded} graded",
              ident="resolved-rate-graded"),
        *([_tile("Check score", pct(card.mean_score), f"share of checks passed; graded only {pct(card.mean_score_graded)}", ident="mean-score", data=f"{card.mean_score:.6f}")]
          if card.mean_score is not None else []),
        _tile("Errors", str(card.errors),
              f"env {card.by_category['env_error']} · infra {card.by_category['infra_error']}; "
              "counted apart", ident="errors",
              data=str(card.errors), cls=errors_cls),
        _tile("Instances", str(card.instances), f"{card.attempts} attempt(s) each", ident="instances"),
        _tile("Wall time", duration(card.wall_seconds), escape(_when(card.finished_at))),
        _tile("Cost", "—" if card.cost_usd is None else f"${card.cost_usd:.2f}",
              "no model ran" if card.tokens is None else
              f"{card.tokens.input:,} in / {card.tokens.output:,} out tokens"
              + ("" if card.cost_known else "; price unknown"), ident="cost"),
    ])
    passk = ""
    if card.pass_at_k:
        body = "".join(f"<tr><td class='n'>{k}</td><td class='n'>{pct(v)}</td>"
                       f"<td class='n'>{pct((card.pass_hat_k or {}).get(k))}</td></tr>"
                       for k, v in card.pass_at_k.items())
        passk = ("<section><h2>pass@k and pass^k</h2><table><thead><tr><th class='n'>k</th>"
                 f"<th class='n'>pass@k</th><th class='n'>pass^k</th></tr></thead><tbody>{body}</tbody></table>"
                 "<p class='note'>Unbiased estimators over the attempts of each instance, averaged over "
                 "instances: pass@k = 1 − C(n−c,k)/C(n,k), pass^k = C(c,k)/C(n,k).</p></section>")
    incomplete = (f"<p class='err'>Run incomplete: {card.missing} selected attempt(s) have no result.</p>"
                  if not card.complete else "")
    repro = "".join(f"<tr><th>{escape(k)}</th><td><code>{escape(str(v))}</code></td></tr>" for k, v in (
        ("orchard", r.orchard_version), ("harness", f"{r.harness or '-'} {r.harness_version or ''}"),
        ("dataset sha256", r.dataset_sha256 or "-"), ("seed", "-" if r.seed is None else r.seed),
        *sorted((f"config.{k}", v) for k, v in r.config.items() if v not in (None, "", [], {}))))
    legend = "".join(f"<span class='pill' style='background:{color(card, c)};margin-right:6px'>{text}</span>"
                     for c, text in (("resolved", "resolved"), ("env_error", "env / infra error")))
    group_title = main_grouping(card)[0]
    # The main grouping's bar chart says all its plain table would (resolved, total, errors, rate):
    # its table shows only when it adds check scores or pass@k / pass^k.
    group_tables_html = "".join(_html_table(t) for t in group_tables(card)
                                if t.title != f"By {group_title}" or len(t.headers) > 5)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>orchard eval · {escape(card.suite)} · {pct(card.resolved_rate)}</title><style>{CSS}</style></head>
<body><main>
<header><h1>orchard eval · {escape(card.suite)}</h1>
<p>{escape(card.source)} · {card.instances} instance(s) · finished {escape(_when(card.finished_at))}</p></header>
{incomplete}
<div class="tiles">{tiles}</div>
<div class="grid">
<section><h2>Resolved rate by {escape(group_title)}</h2>{_bar_chart_groups(card)}
<p class="note">{legend} share of each {escape(group_title)}'s attempts; grey: not resolved.</p></section>
<section><h2>Outcomes</h2>{_bar_chart_categories(card)}
<p class="note">Headline = resolved ÷ all attempts; env/infra errors count as not resolved and are
shown apart. Over graded attempts only: {pct(card.resolved_rate_graded)}.</p></section>
</div>
{passk}
{group_tables_html}
{"".join(_html_table(t, folded=t.ident == "by-check") for t in check_tables(card))}
{f"<section><h2>Instances</h2>{_instances_table(card, results)}</section>" if results else ""}
{_screenshots(card, results, root) if results else ""}
<section><h2>Reproducibility</h2><table>{repro}</table></section>
</main></body></html>
"""

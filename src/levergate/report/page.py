"""A report as one self-contained HTML file (inline CSS, SVG charts, the report's data as inline
JSON and a few lines of inline script that sort the tables: nothing loads from anywhere, so it
opens offline and can be attached to a ticket), and as a markdown summary for pull requests and
chat. Both read the dict `report/data.py` builds."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from levergate.report.svg import Line, bars, hbars, lines, number

__all__ = ["html", "markdown"]

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#111827;
background:#f9fafb}main{max-width:1340px;margin:0 auto;padding:24px}h1{font-size:22px;margin:0}
h2{font-size:16px;margin:28px 0 8px}.sub{color:#6b7280}.cards{display:flex;flex-wrap:wrap;gap:12px;
margin-top:16px}.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px;
min-width:150px}.card b{display:block;font-size:20px}.grid{display:grid;grid-template-columns:
repeat(auto-fit,minmax(560px,1fr));gap:16px}.panel{background:#fff;border:1px solid #e5e7eb;
border-radius:8px;padding:12px}.chart{width:100%;height:auto;font-size:11px;fill:#374151}
.chart .label{font-size:12px;fill:#6b7280}table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:right;white-space:nowrap}
th{cursor:pointer;background:#f3f4f6}td:first-child,th:first-child{text-align:left}th.caveat{text-align:left}
.caveat{color:#4b5563;font-size:12px;white-space:normal;text-align:left;max-width:720px}
"""
SORT = """
document.querySelectorAll('table.sortable th').forEach((th,i)=>th.addEventListener('click',()=>{
const body=th.closest('table').tBodies[0],rows=[...body.rows],dir=th.dataset.dir==='a'?'d':'a';
th.dataset.dir=dir;const v=r=>{const t=r.cells[i].dataset.v??r.cells[i].textContent;const n=+t;
return isNaN(n)?t:n};rows.sort((a,b)=>(v(a)>v(b)?1:v(a)<v(b)?-1:0)*(dir==='a'?1:-1));
rows.forEach(r=>body.appendChild(r))}));
"""


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _usd(value: float) -> str:
    return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _cards(report: Mapping[str, Any]) -> str:
    lat = report["latency"]
    cards = []
    if (t := report.get("totals")) is not None:
        share = t["saved_usd"] / t["counterfactual_usd"] if t["counterfactual_usd"] > 0 else 0.0
        cards += [
            ("requests", f"{t['requests']:,}"),
            ("errors", f"{t['errors']:,}"),
            ("spent", _usd(t["cost_usd"])),
            ("saved (net)", _usd(t["saved_usd"])),
            ("saved share", f"{share:.1%}"),
            ("cache hits", f"{t['cache_hits']:,}"),
        ]
    if (b := report.get("bench")) is not None:
        cards += [("requests ok", f"{b['ok']:,}"), ("achieved rps", number(b["achieved_rps"] or 0))]
    for name, label in (("total_ms", "total"), ("ttft_ms", "TTFT")):
        q = lat.get(name) or {}
        if q.get("count"):
            cards.append((f"{label} p50 / p99 ms", f"{_ms(q.get('p50'))} / {_ms(q.get('p99'))}"))
    return "".join(f'<div class="card">{escape(k)}<b>{escape(v)}</b></div>' for k, v in cards)


def _charts(report: Mapping[str, Any]) -> list[str]:
    cdf = report["cdf"]
    found = [
        lines(
            [
                Line("total", [(x, y) for x, y in cdf["total_ms"]], step=True),
                Line("TTFT", [(x, y) for x, y in cdf["ttft_ms"]], step=True),
            ],
            title="Latency CDF",
            x_label="milliseconds (log)",
            y_label="share of requests",
            x_log=True,
            y_fmt=lambda v: f"{v:.0%}",
            y_min=0.0,
        ),
        bars(
            [(lo, hi, n) for lo, hi, n in report["ttft_histogram"]],
            title="TTFT histogram",
            x_label="time to first token, ms (log bins)",
            y_label="requests",
        ),
    ]
    series = report.get("series")
    if series is not None:
        found.append(_money(series))
        levers = [(lv["lever"], lv["saved_usd"]) for lv in report["levers"] if lv["saved_usd"]]
        found.append(hbars(levers, title="Savings per lever", fmt=_usd))
    return found


def _money(series: Mapping[str, Any]) -> str:
    """Spend and spend-without-the-levers, cumulative, against time from the first bucket (in
    seconds, minutes or hours, whichever reads best)."""
    buckets = series["buckets"]
    start = buckets[0]["ts"]
    span = buckets[-1]["ts"] - start
    units = (("seconds", 1.0, 300), ("minutes", 60.0, 3 * 3600), ("hours", 3600.0, math.inf))
    unit, per = next((u, p) for u, p, most in units if span <= most)
    spent = saved = 0.0
    paid, without = [], []
    for row in buckets:
        spent += row["cost_usd"]
        saved += row["saved_usd"]
        at = (row["ts"] - start) / per
        paid.append((at, spent))
        without.append((at, spent + saved))
    return lines(
        [Line("spent", paid), Line("without the levers", without)],
        title="Cost and savings over time", y_label="US dollars, cumulative",
        x_label=f"{unit} from {_when(start)} ({series['bucket_seconds']:g} s buckets)",
        y_fmt=lambda v: f"${v:.2g}", y_min=0.0,
    )  # fmt: skip


def _table(rows: Sequence[Mapping[str, Any]], key: str, title: str) -> str:
    head = (
        key,
        "requests",
        "errors",
        "total p50 ms",
        "total p95 ms",
        "TTFT p50 ms",
        "input tok",
        "output tok",
        "cost $",
        "saved $",
    )
    body = []
    for r in rows:
        cells = [
            r[key],
            r["requests"],
            r["errors"],
            _ms(r["total_p50_ms"]),
            _ms(r["total_p95_ms"]),
            _ms(r["ttft_p50_ms"]),
            r["input_tokens"],
            r["output_tokens"],
            f"{r['cost_usd']:.6f}",
            f"{r['saved_usd']:.6f}",
        ]
        body.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    return (
        f"<h2>{escape(title)}</h2><table class=sortable><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _levers(report: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(lv['lever'])}</td><td>{escape(_usd(lv['saved_usd']))}</td>"
        f"<td>{lv['share']:.1%}</td><td>{lv['requests']:,}</td>"
        f"<td class=caveat>{escape(lv['caveat'])}</td></tr>"
        for lv in report["levers"]
    )
    quality = report.get("quality") or {}
    live = "".join(f"<li>{escape(k)}: {v:.3f}</li>" for k, v in sorted(quality.items()))
    note = (
        f"<p>Quality gauges read from the gateway's /metrics: <ul>{live}</ul></p>"
        if live
        else "<p class=sub>No live quality gauges in this report (read from a log without "
        "the gateway's /metrics).</p>"
    )
    return (
        "<h2>Savings per lever, and what each may cost in quality</h2><table><thead><tr>"
        "<th>lever</th><th>saved (net)</th><th>of the cost without levers</th>"
        "<th>requests</th><th class=caveat>quality caveat</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>" + note
    )


def html(report: Mapping[str, Any]) -> str:
    """The whole page."""
    span = (
        f"{_when(report.get('first_ts'))} to {_when(report.get('last_ts'))}"
        if report.get("first_ts")
        else ""
    )
    panels = "".join(f'<div class="panel">{chart}</div>' for chart in _charts(report))
    tables = ""
    if report.get("kind") == "log":
        tables = (
            _levers(report)
            + _table(report["routes"], "model", "Per route (model asked for)")
            + _table(report["models"], "alias", "Per model (what answered)")
        )
    # Inside <script>, no `<` at all: neither `</script>` nor `<!--` can end or bend the block.
    data = (json.dumps(report, default=str).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))  # fmt: skip
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width'><title>{escape(report['title'])}"
        f"</title><style>{STYLE}</style></head><body><main><h1>{escape(report['title'])}</h1>"
        f"<div class=sub>{escape(report['source'])}{' - ' + escape(span) if span else ''}; "
        f"generated {escape(_when(report['generated_at']))} by levergate report</div>"
        f"<div class=cards>{_cards(report)}</div><div class=grid style='margin-top:16px'>"
        f"{panels}</div>{tables}</main>"
        f'<script type="application/json" id="report-data">{data}</script>'
        f"<script>{SORT}</script></body></html>\n"
    )


def markdown(report: Mapping[str, Any]) -> str:
    """A short summary: totals, latency, savings per lever, the busiest routes."""
    out = [f"## {report['title']}", "", f"{report['source']}"]
    lat = report["latency"]
    t = report.get("totals")
    if t is not None:
        share = t["saved_usd"] / t["counterfactual_usd"] if t["counterfactual_usd"] > 0 else 0.0
        out += [
            "",
            (
                f"**{t['requests']:,} requests** ({t['errors']:,} errors), "
                f"{_when(report['first_ts'])} to {_when(report['last_ts'])}: spent "
                f"**{_usd(t['cost_usd'])}**, saved **{_usd(t['saved_usd'])}** net "
                f"({share:.1%} of {_usd(t['counterfactual_usd'])} without the levers)."
            ),
        ]
    out += [
        "",
        "| latency | p50 ms | p90 ms | p95 ms | p99 ms | requests |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in (("total_ms", "total"), ("ttft_ms", "TTFT"), ("queued_ms", "queue wait")):
        q = lat.get(name) or {}
        out.append(
            f"| {label} | {_ms(q.get('p50'))} | {_ms(q.get('p90'))} | "
            f"{_ms(q.get('p95'))} | {_ms(q.get('p99'))} | {q.get('count', 0):,} |"
        )
    if t is not None:
        out += ["", "| lever | saved | share | caveat |", "|---|---:|---:|---|"]
        out += [
            f"| {lv['lever']} | {_usd(lv['saved_usd'])} | {lv['share']:.1%} | {lv['caveat']} |"
            for lv in report["levers"]
            if lv["saved_usd"]
        ]
        out += [
            "",
            "| route | requests | errors | total p50 ms | cost | saved |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {r['model']} | {r['requests']:,} | {r['errors']:,} | "
            f"{_ms(r['total_p50_ms'])} | {_usd(r['cost_usd'])} | {_usd(r['saved_usd'])} |"
            for r in report["routes"][:10]
        ]
    if b := report.get("bench"):
        out += [
            "",
            (
                f"bench: {b['ok']:,} ok of {b['sent']:,} sent, achieved "
                f"{number(b['achieved_rps'] or 0)} rps, errors {b['errors']}"
            ),
        ]
    return "\n".join(out) + "\n"

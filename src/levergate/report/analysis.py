"""`levergate analyze --html`: the analysis (analyze/analysis.py's dict) as one self-contained
page in the report's style (report/page.py): cards for the two sides, a bar chart of each
lever's change, the tables, what could not be evaluated, the recommendations."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from html import escape
from typing import Any

from levergate.report.page import SORT, STYLE
from levergate.report.svg import hbars

__all__ = ["html"]


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


def _cell(value: Any) -> str:
    if value is None:
        return "<td>-</td>"
    if isinstance(value, float):
        return f"<td data-v='{value!r}'>{value:,.4g}</td>"
    return f"<td>{escape(str(value))}</td>"


def _cards(a: Mapping[str, Any]) -> str:
    base, cand, total = a["baseline"], a["candidate"], a["total"]
    cards = [("requests", f"{a['input']['requests']:,}"), ("baseline", _usd(base["cost_usd"])),
             ("candidate", _usd(cand["cost_usd"])),
             ("change", f"{_usd(total['change_usd'])} ({total['change_share']:+.1%})")]  # fmt: skip
    return "".join(f"<div class=card>{escape(k)}<b>{escape(v)}</b></div>" for k, v in cards)


def _levers(a: Mapping[str, Any]) -> str:
    head = ("lever", "cost change $", "share", "TTFT p50 ms", "TTFT p95 ms", "total p95 ms",
            "hit rate", "quality caveat")  # fmt: skip
    body = []
    for r in a["levers"]:
        if not r["evaluable"]:
            continue
        cells = [_cell(r["lever"]), _cell(r["change_usd"]), _cell(r["change_share"]),
                 _cell(r["ttft_p50_change_ms"]), _cell(r["ttft_p95_change_ms"]),
                 _cell(r["total_p95_change_ms"]), _cell(r["hit_rate"]),
                 f"<td class=caveat>{escape(r['caveat'])}</td>"]  # fmt: skip
        body.append("<tr>" + "".join(cells) + "</tr>")
    return ("<h2>Each lever alone, against the baseline</h2><table class=sortable><thead><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{''.join(body)}</tbody></table>")  # fmt: skip


def _lists(a: Mapping[str, Any]) -> str:
    missing = "".join(f"<li><b>{escape(r['lever'])}</b>: {escape(r['reason'])}</li>"
                      for r in a["not_evaluable"])  # fmt: skip
    ranked = "".join(f"<li>{escape(r['text'])}</li>" for r in a["recommendations"])
    advice = (f"<ol>{ranked}</ol>" if ranked
              else "<p class=sub>No evaluated lever saves on this input.</p>")  # fmt: skip
    return (f"<h2>Not evaluable</h2><ul>{missing}</ul>" if missing else "") + (
        f"<h2>Recommendations</h2>{advice}"
    )


def html(a: Mapping[str, Any]) -> str:
    """The whole page."""
    bars = [(r["lever"], r["change_usd"]) for r in a["levers"] if r["evaluable"]]
    chart = hbars(bars, title="Cost change of each lever alone (US dollars)") if bars else ""
    data = (json.dumps(a, default=str).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))  # fmt: skip
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = "levergate analyze"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width'><title>{title}</title>"
        f"<style>{STYLE}</style></head><body><main><h1>{title}</h1>"
        f"<div class=sub>{escape(a['input']['source'])}; latency model "
        f"{escape(a['latency_model']['how'])}; generated {when}</div>"
        f"<div class=cards>{_cards(a)}</div>"
        f"<div class=panel style='margin-top:16px'>{chart}</div>{_levers(a)}{_lists(a)}</main>"
        f'<script type="application/json" id="analysis-data">{data}</script>'
        f"<script>{SORT}</script></body></html>\n"
    )

"""The submitted terminal state, drawn as the kiosk's screen would show it.

Input is a record's ``response`` in the scorer's shape (``outcome``,
``kiosk_action``, ``reasoning``, ``ui_updates.{route, fare_quote,
advisory_banners, assistant_message}``). Any part may be missing or of the
wrong type (a plain-text answer, a malformed submission): each part is drawn
only when it has the expected shape, and the raw answer is shown otherwise, so
an odd answer never breaks a page.
"""

from __future__ import annotations

from typing import Any

from metrobench.transcripts.records import CaseRecord
from metrobench.viewer.html import esc, pretty
from metrobench.vocabulary import BANNER_SEVERITIES

#: What the kiosk's button says for each action.
ACTION_LABELS = {
    "prompt_purchase": "Buy ticket",
    "display_info": "OK",
    "block_purchase": "Purchase unavailable",
    "refer_to_staff": "Please ask a member of staff",
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def render_banners(banners: list[Any]) -> str:
    out = []
    for banner in banners:
        b = _dict(banner)
        severity = b.get("severity") if b.get("severity") in BANNER_SEVERITIES else "info"
        out.append(f"<div class=\"banner {severity}\"><b>{esc(b.get('title'))}</b> "
                   f"<span class=\"note\">[{esc(b.get('severity'))}]</span><br>{esc(b.get('body'))}</div>")
    return "".join(out)


def _stop_name(stop: Any) -> str:
    if isinstance(stop, dict):
        return str(stop.get("station_name") or stop.get("station_id") or stop)
    return str(stop)


def render_route(route: Any) -> str:
    r = _dict(route)
    if not r:
        return ""
    stops = " → ".join(esc(_stop_name(s)) for s in _list(r.get("stops")))
    lines = ", ".join(esc(line) for line in _list(r.get("line_sequence")))
    return (f"<div class=\"route\"><b>{esc(r.get('origin'))} → {esc(r.get('destination'))}</b><br>"
            f"lines: {lines or '–'} · transfers: {esc(r.get('transfers'))} · "
            f"~{esc(r.get('estimated_minutes'))} min · {esc(r.get('distance_miles'))} mi"
            f"<div class=\"stops\">{stops}</div></div>")


def _line_label(item: dict[str, Any]) -> str:
    label = item.get("label") or item.get("rider_type") or item.get("description") or ""
    count = item.get("count")
    return f"{label} ×{count}" if count not in (None, "") and "label" not in item else str(label)


def _line_amount(item: dict[str, Any]) -> Any:
    for key in ("subtotal", "amount", "total", "unit_fare"):
        if key in item:
            return item[key]
    return ""


def render_fare(quote: Any) -> str:
    q = _dict(quote)
    if not q:
        return ""
    currency = q.get("currency")
    rows = [f"<tr><td>{esc(_line_label(_dict(i)))}</td><td class=\"num\">{esc(_line_amount(_dict(i)))}</td></tr>"
            for i in _list(q.get("line_items"))]
    rows += [f"<tr><td>discount: {esc(_line_label(_dict(d)))}</td>"
             f"<td class=\"num\">{esc(_line_amount(_dict(d)))}</td></tr>" for d in _list(q.get("discounts"))]
    rows.append(f"<tr><th>Total</th><th class=\"num\">{esc(q.get('total'))} {esc(currency)}</th></tr>")
    return f"<table class=\"fare\">{''.join(rows)}</table>"


def render_action(action: Any) -> str:
    a = _dict(action)
    name = a.get("action")
    label = ACTION_LABELS.get(name, name) if isinstance(name, str) else name
    css = name if name in ACTION_LABELS else ""
    return (f"<div><span class=\"action {css}\">{esc(label)}</span> "
            f"<span class=\"note\">action {esc(name)} · reason {esc(a.get('reason_code'))}</span></div>")


def render_terminal_state(record: CaseRecord | None) -> str:
    """The kiosk screen of the case's scored answer, or why there is none."""
    if record is None:
        return "<p class=\"note\">No transcript record for this case (scored as missing).</p>"
    response = record.response
    if not isinstance(response, dict) or not isinstance(response.get("ui_updates"), dict):
        raw = record.raw_content or (response if response is not None else "")
        return ("<p class=\"note\">No accepted submission: the scored answer is this text.</p>"
                f"{pretty(raw) if raw != '' else '<p>(empty)</p>'}")
    ui = response["ui_updates"]
    return (
        f"<div class=\"kiosk\"><div><span class=\"outcome\">{esc(response.get('outcome'))}</span></div>"
        f"{render_banners(_list(ui.get('advisory_banners')))}{render_route(ui.get('route'))}"
        f"{render_fare(ui.get('fare_quote'))}<p class=\"message\">{esc(ui.get('assistant_message'))}</p>"
        f"{render_action(response.get('kiosk_action'))}</div>"
        + (f"<details><summary>reasoning</summary><pre>{esc(response.get('reasoning'))}</pre></details>"
           if response.get("reasoning") else "")
    )

"""HTML building blocks of the viewer: escaping, JSON blocks, and the page shell.

Every value that comes from a run or a score passes through :func:`esc` (text
and attribute values alike) before it is put in a page. The page shell holds
the only script, a constant; the Content-Security-Policy allows that script by
its SHA-256 and nothing else (no other script, no network, images only as
``data:``), so even a value that escaped escaping could not run or fetch.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any
from urllib.parse import quote

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em;color:#1d2733}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}a{color:#0b5cad}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccd;padding:.2em .6em;text-align:left}
th{background:#eef1f6}td.num{text-align:right}td.score{white-space:nowrap}tr.failed td.score{background:#fde2e1}
tr.ok td.score{background:#e3f5e1}tr.unjudged td.score{background:#f2f2f2}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.5em;margin:.3em 0;border-radius:4px}
.msg{border-left:4px solid #99a;padding:.2em .8em;margin:.6em 0}.msg.user{border-color:#0b5cad}
.msg.assistant{border-color:#2e7d32}.msg.system{border-color:#888}.role{font-weight:600}
.call{border:1px solid #ccd;border-radius:4px;padding:.3em .8em;margin:.4em 0}
.call.error{border-color:#c62828;background:#fff5f5}.feedback{color:#c62828;font-weight:600}
.kiosk{border:2px solid #334;border-radius:10px;padding:.8em 1em;max-width:560px;background:#fcfcff}
.outcome{display:inline-block;padding:.1em .6em;border-radius:1em;background:#334;color:#fff}
.banner{border-radius:4px;padding:.3em .6em;margin:.3em 0}.banner.info{background:#e3effd}
.banner.warning{background:#fff4d6}.banner.critical{background:#fde2e1}.banner.positive{background:#e3f5e1}
.action{display:inline-block;margin-top:.6em;padding:.4em 1em;border-radius:6px;background:#0b5cad;color:#fff}
.action.block_purchase,.action.refer_to_staff{background:#c62828}.stops{color:#556}
.side{display:grid;gap:1.2em;grid-template-columns:repeat(auto-fit,minmax(420px,1fr))}.side>*{min-width:0;overflow-x:auto}
.note{color:#667}.hidden{display:none}
"""

#: The only script of every page: it marks the page as rendered (the browser test reads
#: this marker) and filters the case list by failed component. It reads data attributes
#: only; no value from a run is ever part of a script.
SCRIPT = """
document.body.setAttribute('data-viewer', 'ready');
var pick = document.getElementById('failed-filter');
if (pick) {
  pick.addEventListener('change', function () {
    var want = pick.value;
    document.querySelectorAll('tr[data-failed]').forEach(function (row) {
      var failed = row.getAttribute('data-failed').split(' ');
      var show = want === '' || (want === '*' ? row.getAttribute('data-failed') !== '' : failed.indexOf(want) >= 0);
      row.classList.toggle('hidden', !show);
    });
  });
}
"""


def _script_hash() -> str:
    digest = hashlib.sha256(SCRIPT.encode()).digest()
    return "sha256-" + base64.b64encode(digest).decode()


CSP = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       f"script-src '{_script_hash()}'; base-uri 'none'; form-action 'none'")


def esc(value: Any) -> str:
    """Text or attribute value, escaped (quotes too); None shows as nothing."""
    return "" if value is None else html.escape(str(value), quote=True)


def pretty(value: Any) -> str:
    """A JSON value as an escaped, indented ``<pre>`` block (strings that hold JSON are parsed)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return f"<pre>{esc(value)}</pre>"
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return f"<pre>{esc(text)}</pre>"


def href(*parts: str) -> str:
    """A relative link from path parts, each percent-quoted, then escaped for the attribute."""
    return esc("/".join(quote(part, safe="") if part not in ("..", ".") else part for part in parts))


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def page(title: str, body: str, *, up: str = "") -> str:
    """A whole page: ``up`` is the relative path to the site root (for the index link)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body>"
        f"<nav><a href=\"{esc(up)}index.html\">MetroLLM-Bench cases</a></nav>\n"
        f"<h1>{esc(title)}</h1>\n{body}\n<script>{SCRIPT}</script></body></html>\n"
    )

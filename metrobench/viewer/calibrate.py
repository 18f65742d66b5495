"""The rating page of the case viewer (``calibrate.html``): people rate the calibration sample 0/1/2.

Contract: one page holds every pair of the sample (:mod:`metrobench.calibration.sample`),
each as a section with the rubric's question and scale, the model's response, the case's
title, events, ground truth and context, the tool calls and the operator's facts; the
judges' ratings are not on it (the sample is blind). Its one script, a constant allowed by
its hash like the viewer's own (:mod:`metrobench.viewer.html`), shows one pair at a time:
keys 0, 1, 2 rate the pair shown and move on, the arrow keys move without rating; the
progress reads "k / n rated". Ratings and the rater's name are kept in the browser's localStorage under
the sample's digest (a reload, or another sample, never mixes them up), and "Download CSV"
saves ``id,<rater>`` with one line per pair (blank: not rated): the ratings CSV that
``calibration.ratings`` lists and ``metrobench table1`` reads. Every value from the sample
is escaped text; none is part of the script.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

from metrobench.viewer.html import STYLE, esc, pretty

#: The page's only script (no value from the sample is ever part of it).
RATE_SCRIPT = """
(function () {
  var pairs = Array.prototype.slice.call(document.querySelectorAll('section.pair'));
  var key = 'metrobench-calibration:' + document.body.getAttribute('data-sample');
  var rater = document.getElementById('rater');
  var stored = {};
  try { stored = JSON.parse(window.localStorage.getItem(key) || '{}') || {}; } catch (e) { stored = {}; }
  var ratings = stored.ratings || {};
  if (stored.rater) { rater.value = stored.rater; }
  var at = 0;
  for (var i = 0; i < pairs.length; i++) {
    if (!Object.prototype.hasOwnProperty.call(ratings, pairs[i].getAttribute('data-id'))) { at = i; break; }
  }
  function rated(id) { return Object.prototype.hasOwnProperty.call(ratings, id); }
  function save() {
    try { window.localStorage.setItem(key, JSON.stringify({rater: rater.value, ratings: ratings})); } catch (e) {}
  }
  function show() {
    pairs.forEach(function (pair, i) { pair.classList.toggle('hidden', i !== at); });
    var id = pairs[at].getAttribute('data-id');
    pairs[at].querySelector('[data-given]').textContent = rated(id) ? String(ratings[id]) : '\\u2013';
    var done = pairs.filter(function (pair) { return rated(pair.getAttribute('data-id')); }).length;
    document.getElementById('progress').textContent =
      done + ' / ' + pairs.length + ' rated \\u00b7 pair ' + (at + 1) + ' of ' + pairs.length;
    document.body.setAttribute('data-rated', String(done));
  }
  document.addEventListener('keydown', function (event) {
    if (event.target === rater || event.ctrlKey || event.metaKey || event.altKey) { return; }
    if (event.key === '0' || event.key === '1' || event.key === '2') {
      ratings[pairs[at].getAttribute('data-id')] = Number(event.key);
      save();
      if (at < pairs.length - 1) { at += 1; }
    } else if (event.key === 'ArrowRight') {
      if (at < pairs.length - 1) { at += 1; }
    } else if (event.key === 'ArrowLeft') {
      if (at > 0) { at -= 1; }
    } else { return; }
    event.preventDefault();
    show();
  });
  rater.addEventListener('input', save);
  document.getElementById('download').addEventListener('click', function () {
    var name = (rater.value || '').replace(/[",\\r\\n]/g, ' ').trim() || 'rater';
    var lines = ['id,' + name];
    pairs.forEach(function (pair) {
      var id = pair.getAttribute('data-id');
      lines.push(id + ',' + (rated(id) ? String(ratings[id]) : ''));
    });
    var link = document.createElement('a');
    link.href = URL.createObjectURL(new Blob([lines.join('\\n') + '\\n'], {type: 'text/csv'}));
    link.download = 'ratings-' + name.replace(/[^A-Za-z0-9._-]+/g, '_') + '.csv';
    document.body.appendChild(link);
    link.click();
    link.remove();
  });
  show();
  document.body.setAttribute('data-viewer', 'ready');
})();
"""

_EXTRA_STYLE = """
section.pair{border-top:2px solid #ccd;margin-top:1em}.bar{position:sticky;top:0;background:#fff;padding:.4em 0;
border-bottom:1px solid #ccd;z-index:1}.bar b{font-size:1.1em}.scale{background:#fff8e1;padding:.3em .6em}
.given b{font-size:1.3em}kbd{border:1px solid #99a;border-radius:3px;padding:0 .3em;background:#f6f8fa}
"""


def _hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


CSP = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{_hash(RATE_SCRIPT)}'; "
       "base-uri 'none'; form-action 'none'")


def _pair(pair: dict[str, Any], number: int, total: int) -> str:
    blocks = [("The model's response", pair.get("model_response")),
              ("The rider's events", pair.get("case_events")),
              ("Ground truth", pair.get("ground_truth_summary")),
              ("System context", {"current_time": pair.get("current_time"),
                                  **(pair.get("system_context_summary") or {})}),
              ("Its tool calls", pair.get("tool_calls_detail")),
              ("The operator's facts", pair.get("system_prompt_context"))]
    body = "".join(f"<h3>{esc(title)}</h3>{pretty(value)}" for title, value in blocks)
    return (f"<section class=\"pair hidden\" data-id=\"{esc(pair['id'])}\" data-rubric=\"{esc(pair['rubric'])}\">"
            f"<h2>Pair {number} of {total}: {esc(pair['case_id'])} \u00b7 {esc(pair['rubric'])}</h2>"
            f"<p><b>{esc(pair.get('case_title'))}</b> ({esc(pair.get('system'))}, category "
            f"{esc(pair.get('category'))})</p>"
            f"<p><b>{esc(pair.get('rubric_question'))}</b></p><p class=\"scale\">{esc(pair.get('rubric_scale'))}</p>"
            f"<p class=\"given\">Your rating: <b data-given>\u2013</b></p>{body}</section>")


def calibrate_page(pairs: Sequence[dict[str, Any]], digest: str) -> str:
    """The whole rating page for ``pairs``; ``digest`` names the sample (its ratings' storage key)."""
    sections = "\n".join(_pair(pair, i, len(pairs)) for i, pair in enumerate(pairs, 1))
    title = "Rate the judge's calibration sample"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">"
        f"<title>{esc(title)}</title><style>{STYLE}{_EXTRA_STYLE}</style></head>\n"
        f"<body data-sample=\"{esc(digest)}\">"
        "<nav><a href=\"index.html\">MetroLLM-Bench cases</a></nav>\n"
        f"<h1>{esc(title)}</h1>\n"
        "<p class=\"note\">Rate each answer on its rubric alone: <kbd>0</kbd> <kbd>1</kbd> <kbd>2</kbd> rate the "
        "pair shown and go on, <kbd>\u2190</kbd> <kbd>\u2192</kbd> move without rating. Ratings stay in this "
        "browser; download them as the CSV Table 1 reads (<code>calibration.ratings</code>).</p>\n"
        "<div class=\"bar\"><label>Rater <input id=\"rater\" value=\"rater\" size=\"16\"></label> "
        "<b id=\"progress\"></b> <button id=\"download\" type=\"button\">Download CSV</button></div>\n"
        f"{sections}\n<script>{RATE_SCRIPT}</script></body></html>\n"
    )

"""The case viewer: a static, self-contained HTML site of runs and their scores.

``metrobench view --runs DIR --scores DIR [--model M ...] --out SITE`` reads only
the project's own formats — transcripts (or the reference harness's result
JSON) at ``DIR/<model>/<system>.jsonl|.json`` and Parquet scores at
``DIR/model=M/system=S/part.parquet`` — and writes plain HTML files that open
from disk, without a server and without any external asset:

* ``index.html``: each model's headline Tier 1 and composite;
* ``models/<model>.html``: per system and per category, then every case with
  its failed components and a filter on them;
* ``cases/<model>/<case>.html``: the conversation turn by turn, each tool call
  with its arguments and answer, the terminal state as the kiosk shows it,
  and the score breakdown with each component's reason;
* ``compare/<case>.html`` (when several models are viewed): the models side by side.

Everything a run or a score contains is untrusted text (model output above
all): it is HTML-escaped wherever it is shown, and no data is ever placed in a
script. Each page carries one constant inline script (allowed by its hash in
the page's Content-Security-Policy, which forbids every other script).
"""

from metrobench.viewer.site import build_site

__all__ = ["build_site"]

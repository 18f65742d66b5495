"""The viewer's pages: the index, one overview per model, one page per case, comparisons.

Every function returns a complete HTML string; :mod:`metrobench.viewer.site`
decides where it is written. Links are relative (``cases/<model>/<case>.html``
and so on), so the site works from any folder and from ``file://``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from metrobench.scoring import metrics
from metrobench.viewer.conversation import render_conversation
from metrobench.viewer.html import esc, fmt, href, page
from metrobench.viewer.kiosk import render_terminal_state
from metrobench.viewer.load import CaseResult
from metrobench.vocabulary import WHOLE_IN_REPORTS


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def headline_of(cases: Sequence[CaseResult]) -> tuple[float, float]:
    """(Tier 1, composite): the leaderboard's arithmetic (:func:`metrobench.scoring.metrics.headline`)."""
    by_system: dict[str, list] = defaultdict(list)
    for case in cases:
        by_system[case.system].append(case.totals)
    result = metrics.headline(by_system)
    return (round(result.tier1, 1), round(result.composite, 1)) if by_system else (0.0, 0.0)


def render_scores(case: CaseResult) -> str:
    """The score breakdown: each component's tier, score/max and reason."""
    rows = []
    for c in case.components:
        state = "unjudged" if c.score is None else "failed" if c.failed else "ok"
        rows.append(f"<tr class=\"{state}\" data-component=\"{esc(c.component)}\"><td>{esc(c.component)}</td>"
                    f"<td class=\"num\">{c.tier}</td><td class=\"num score\">{fmt(c.score)} / {fmt(c.max)}</td>"
                    f"<td>{'judge' if c.judged else 'rule'}</td><td>{esc(c.reason)}</td></tr>")
    error = f"<p class=\"feedback\">run error: {esc(case.error)}</p>" if case.error else ""
    return (f"{error}<p>Tier 1 <b>{case.tier1_pct:g}</b> · composite <b>{case.composite_pct:g}</b>"
            " <span class=\"note\">(unjudged components count 0)</span></p>"
            "<table class=\"scores\"><tr><th>component</th><th>tier</th><th>score / max</th><th>by</th>"
            f"<th>reason</th></tr>{''.join(rows)}</table>")


def case_section(case: CaseResult) -> str:
    """Terminal state, scores and conversation of one model on one case."""
    record = case.record
    stats = ""
    if record is not None and record.api_rounds:
        stats = (f"<p class=\"note\">{record.api_rounds} model calls · {record.input_tokens} input / "
                 f"{record.output_tokens} output tokens · {record.e2e_ms:g} ms"
                 f"{' · truncated' if record.truncated else ''}</p>")
    return (f"<section class=\"model\" data-model=\"{esc(case.model)}\"><h2>{esc(case.model)}</h2>{stats}"
            f"<h3>Terminal state</h3>{render_terminal_state(record)}"
            f"<h3>Scores</h3>{render_scores(case)}"
            f"<h3>Conversation</h3>{render_conversation(record, case.rebuilt)}</section>")


def _case_header(case: CaseResult) -> str:
    return (f"<p>{esc(case.title)} <span class=\"note\">· system {esc(case.system)} · category "
            f"{esc(case.category)} · {esc(case.partition)}</span></p>")


def case_page(case: CaseResult, has_compare: bool) -> str:
    compare = (f"<p><a href=\"{href('..', '..', 'compare', case.case_id + '.html')}\">"
               "compare the models on this case</a></p>" if has_compare else "")
    back = f"<p><a href=\"{href('..', '..', 'models', case.model + '.html')}\">{esc(case.model)}: all cases</a></p>"
    return page(f"{case.case_id} · {case.model}", back + _case_header(case) + compare + case_section(case),
                up="../../")


def compare_page(cases: Sequence[CaseResult]) -> str:
    """The same case for several models, side by side."""
    first = cases[0]
    summary = "".join(f"<tr><td><a href=\"{href('..', 'cases', c.model, c.case_id + '.html')}\">{esc(c.model)}</a>"
                      f"</td><td class=\"num\">{c.tier1_pct:g}</td><td class=\"num\">{c.composite_pct:g}</td>"
                      f"<td>{esc(' '.join(c.failed))}</td></tr>" for c in cases)
    body = (_case_header(first) + "<table><tr><th>model</th><th>Tier 1</th><th>composite</th>"
            f"<th>failed components</th></tr>{summary}</table>"
            f"<div class=\"side\">{''.join(case_section(c) for c in cases)}</div>")
    return page(f"{first.case_id}: {len(cases)} models side by side", body, up="../")


def _group_table(cases: Sequence[CaseResult], key: str, label: str) -> str:
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for case in cases:
        groups[getattr(case, key)].append(case)
    rows = "".join(f"<tr><td>{esc(name)}</td><td class=\"num\">{len(group)}</td>"
                   f"<td class=\"num\">{_mean([c.tier1_pct for c in group]):g}</td>"
                   f"<td class=\"num\">{_mean([c.composite_pct for c in group]):g}</td></tr>"
                   for name, group in sorted(groups.items()))
    return (f"<table class=\"by-{esc(key)}\"><tr><th>{esc(label)}</th><th>cases</th><th>Tier 1</th>"
            f"<th>composite</th></tr>{rows}</table>")


def _case_rows(cases: Sequence[CaseResult], compared: set[str]) -> str:
    rows = []
    for c in cases:
        link = href("..", "cases", c.model, c.case_id + ".html")
        side = (f" <a href=\"{href('..', 'compare', c.case_id + '.html')}\">side by side</a>"
                if c.case_id in compared else "")
        rows.append(f"<tr data-failed=\"{esc(' '.join(c.failed))}\"><td><a href=\"{link}\">{esc(c.case_id)}</a>"
                    f"{side}</td><td>{esc(c.system)}</td><td>{esc(c.category)}</td><td>{esc(c.partition)}</td>"
                    f"<td class=\"num\">{c.tier1_pct:g}</td><td class=\"num\">{c.composite_pct:g}</td>"
                    f"<td>{esc(', '.join(c.failed))}{' · ' + esc(c.error) if c.error else ''}</td></tr>")
    return "".join(rows)


def model_page(model: str, cases: Sequence[CaseResult], compared: set[str]) -> str:
    """Per system and category, then the case list with a filter on failed components."""
    tier1, composite = headline_of(cases)
    components = sorted({name for c in cases for name in c.failed})
    options = "".join(f"<option value=\"{esc(name)}\">{esc(name)}</option>" for name in components)
    body = (f"<p>Headline (mean of the system means) over {len(cases)} scored cases: Tier 1 <b>{tier1:g}</b>"
            f" · composite <b>{composite:g}</b> <span class=\"note\">(unjudged components count 0)</span></p>"
            f"<h2>Per system</h2>{_group_table(cases, 'system', 'system')}"
            f"<h2>Per category</h2>{_group_table(cases, 'category', 'category')}"
            "<h2>Cases</h2><label>failed component: <select id=\"failed-filter\">"
            f"<option value=\"\">all cases</option><option value=\"*\">any failed</option>{options}"
            "</select></label><table class=\"cases\"><tr><th>case</th><th>system</th><th>category</th>"
            "<th>partition</th><th>Tier 1</th><th>composite</th><th>failed components</th></tr>"
            f"{_case_rows(cases, compared)}</table>")
    return page(f"{model}", body, up="../")


def _model_cell(model: str, labels: Mapping[str, str]) -> str:
    """The index's name of a model: its leaderboard label, the model name beside it; else the name."""
    link = href("models", model + ".html")
    label = labels.get(model)
    if not label or label == model:
        return f"<a href=\"{link}\">{esc(model)}</a>"
    return f"<a href=\"{link}\">{esc(label)}</a> <span class=\"note\">{esc(model)}</span>"


def index_page(by_model: dict[str, list[CaseResult]], compared: Sequence[str],
               labels: Mapping[str, str] | None = None, partition: str = WHOLE_IN_REPORTS) -> str:
    """Every model (by its leaderboard label where ``labels`` has one) with its headline, then the
    models among the paper's published Table 2 (:func:`among_published_html`), then comparisons."""
    labels = labels or {}
    rows = "".join(f"<tr><td>{_model_cell(m, labels)}</td>"
                   f"<td class=\"num\">{len(cases)}</td><td class=\"num\">{headline_of(cases)[0]:g}</td>"
                   f"<td class=\"num\">{headline_of(cases)[1]:g}</td></tr>" for m, cases in by_model.items())
    compare = ""
    if compared:
        links = " ".join(f"<a href=\"{href('compare', c + '.html')}\">{esc(c)}</a>" for c in compared)
        compare = f"<h2>Side by side ({len(compared)} cases)</h2><p>{links}</p>"
    body = ("<table class=\"models\"><tr><th>model</th><th>cases</th><th>Tier 1</th><th>composite</th></tr>"
            f"{rows}</table>{among_published_html(by_model, labels, partition)}{compare}")
    return page("MetroLLM-Bench cases", body)


def among_published_html(by_model: dict[str, list[CaseResult]], labels: Mapping[str, str], partition: str) -> str:
    """The viewed models among the paper's published Table 2 rows (:mod:`metrobench.paper.published`),
    each row marked published or run here; a model viewed on other cases than the paper's 238 held-out
    (a sample, another partition, fewer systems) says so, and an unjudged composite says it counts
    Tier 2 at zero. Rows carry a class (``published``, ``run-here``), never a bare ``<tr>``."""
    from metrobench.paper.published import PUBLISHED, Entry, among_published, load_published, sample_note

    p = load_published()
    mine = []
    for model, cases in by_model.items():
        if not cases:
            continue
        tier1, composite = headline_of(cases)
        unjudged = any(c.score is None for case in cases for c in case.components)
        mine.append(Entry(labels.get(model, model), composite, tier1, cases=len(cases),
                          systems=len({case.system for case in cases}), partition=partition,
                          judge="Tier 2 unjudged: composite counts it at 0" if unjudged else None))
    if not mine:
        return ""
    rows = []
    for e in among_published(mine, p):
        rank = "ref." if e.reference else str(e.rank) if e.rank else ""
        note = sample_note(e, p)
        kind = "published" if e.source == PUBLISHED else "run-here"
        rows.append(f"<tr class=\"{kind}\"><td class=\"num\">{esc(rank)}</td><td>{esc(e.label)}</td>"
                    f"<td class=\"num\">{e.composite:.2f}</td><td class=\"num\">{e.tier1:.2f}</td>"
                    f"<td>{esc(e.source + (f' ({note})' if note else ''))}</td></tr>")
    return (f"<h2>Beside the paper's published {esc(p.table2.source.table)} (held-out, {p.holdout_cases} cases; "
            f"arXiv:{esc(p.source.arxiv)})</h2><table class=\"published\"><tr><th>rank</th><th>model</th>"
            f"<th>composite</th><th>Tier 1</th><th>source</th></tr>{''.join(rows)}</table>")

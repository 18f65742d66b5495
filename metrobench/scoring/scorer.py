"""Scoring a run: every applicable component of every case, one row each.

Which components a case has is decided by its ``scoring`` dict alone, except
four that every case gets (with a default maximum where the dict lacks them);
each score is clamped to its maximum (spec §7.2). The components, their tiers
and those defaults are declared in :mod:`metrobench.scoring.registry`. Judged components are
collected over the whole run first and sent to the judge together, so a
concurrent backend is used fully and cached judgments cost nothing.

A record is scored only against the case it was run on: one whose ``meta.case_sha`` (the digest
of the case as the runner read it, :func:`metrobench.data.models.case_digest`) differs from the
case being scored was run on another copy of the benchmark or before an edit, and the whole run is
refused (:func:`check_case_digests`), naming the cases and their count. Records without a digest
(old transcripts, the reference's result JSON) are scored as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metrobench.data.loader import SystemData
from metrobench.data.models import case_digest
from metrobench.errors import MetrobenchError
from metrobench.scoring.coerce import response_of, tool_calls_of
from metrobench.scoring.components import CaseView
from metrobench.scoring.judge import Judge
from metrobench.scoring.metrics import CaseTotals, Component, case_totals
from metrobench.scoring.registry import ComponentSpec, components, spec
from metrobench.scoring.rubrics import JudgeTask, operator_facts
from metrobench.transcripts.records import CaseRecord, latest_records


def tier_of(component: str) -> int:
    """The tier component ``component`` is declared with."""
    return spec(component).tier


@dataclass
class ComponentScore:
    component: str
    score: float | None  # None: a judged component left unjudged (--judge none)
    max: float
    reason: str
    judged: bool = False

    @property
    def tier(self) -> int:
        return tier_of(self.component)


@dataclass
class CaseScore:
    """All component scores of one case, in the reference's breakdown order."""

    case_id: str
    category: str
    components: list[ComponentScore] = field(default_factory=list)
    error: str | None = None

    def totals(self, system: str = "", fill: str = "zero") -> CaseTotals:
        """The reference's per-case totals (unjudged components counted per ``fill``)."""
        return case_totals(self.case_id, system, [Component(c.component, c.tier, c.score, c.max)
                                                  for c in self.components], fill=fill)


def applicable_specs(case: dict[str, Any]) -> list[tuple[ComponentSpec, float]]:
    """(component, max) for the components this case is scored on, in breakdown order."""
    scoring = case.get("scoring", {})
    out = []
    for c in components():
        if c.name in scoring:
            out.append((c, scoring[c.name]))
        elif c.max_points is not None:
            out.append((c, c.max_points))
    return out


def applicable(case: dict[str, Any]) -> list[tuple[str, float]]:
    """(component name, max) for the components this case is scored on, in breakdown order."""
    return [(c.name, maximum) for c, maximum in applicable_specs(case)]


def check_case_digests(cases: Sequence[dict[str, Any]], records: dict[str, CaseRecord],
                       source: str = "") -> None:
    """Refuse records run on other case data than ``cases`` (their ``meta.case_sha`` differs).

    Why refuse rather than score: a record answers the case the model was shown; scored against an
    edited case, a right answer counts as wrong (issue 51: Tier 1 82.2 where the agent scores 100.0),
    and nothing in the scores would say so. Only each case's scored record (``records``, the
    latest) is checked: an older, superseded one (``--rerun-changed``) may differ."""
    by_id = {case["id"]: case for case in cases}
    stale = [case_id for case_id, record in records.items()
             if case_id in by_id and isinstance(record.meta, dict) and record.meta.get("case_sha") is not None
             and record.meta["case_sha"] != case_digest(by_id[case_id])]
    if not stale:
        return
    shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
    where = f"{source}: " if source else ""
    count = f"{len(stale)} record{'' if len(stale) == 1 else 's'}"
    raise MetrobenchError(
        f"{where}{count} ({shown}) {'was' if len(stale) == 1 else 'were'} run on other case data than the "
        f"benchmark being scored against (meta.case_sha differs): score with --data naming the copy they "
        f"were run on, or rerun them (metrobench run --rerun-changed)")


class Scorer:
    """Scores records of one system against its cases."""

    def __init__(self, system: SystemData, *, errata: frozenset[str] = frozenset(),
                 judge: Judge | None = None) -> None:
        self.system = system
        self.errata = errata
        self.judge = judge
        self.facts = operator_facts(system.framebook_raw, system.fares_raw)

    def _view(self, case: dict[str, Any], record: CaseRecord) -> CaseView:
        framebook = self.system.framebook
        return CaseView(case=case, response=response_of(record.response),
                        raw_content=record.raw_content, calls=tool_calls_of(record.tool_calls_made),
                        currency_symbol=framebook.currency_symbol,
                        smartcard=framebook.terminology.smartcard, errata=self.errata, facts=self.facts)

    def score_case(self, case: dict[str, Any], record: CaseRecord,
                   pending: list[tuple[ComponentScore, JudgeTask]]) -> CaseScore:
        """Score one case; judge calls it needs are appended to ``pending``."""
        view = self._view(case, record)
        result = CaseScore(case["id"], case.get("category", ""), error=record.error)
        for component, maximum in applicable_specs(case):
            name = component.name
            outcome = component.function(view)
            if component.judged:
                if self.judge is None:
                    entry = ComponentScore(name, None, maximum, "not judged (--judge none)")
                elif isinstance(outcome, JudgeTask):
                    entry = ComponentScore(name, None, maximum, "", judged=True)
                    pending.append((entry, outcome))
                else:
                    raw, reason = outcome
                    entry = ComponentScore(name, min(raw, maximum), maximum, reason, judged=True)
            else:
                raw, reason = outcome
                entry = ComponentScore(name, min(raw, maximum), maximum, reason)
            result.components.append(entry)
        return result

    def score(self, cases: Sequence[dict[str, Any]], records: Iterable[CaseRecord], *,
              model: str = "", warn=None, source: str = "") -> list[CaseScore]:
        """Score ``records`` against ``cases`` (case-file order); absent cases score as missing.

        A record run on other case data is refused (:func:`check_case_digests`; ``source`` names
        the run file in that error)."""
        warn = warn or (lambda msg: print(f"metrobench: warning: {msg}", file=sys.stderr))
        known = {case["id"] for case in cases}
        ours = []
        for record in records:
            if record.case_id not in known:
                warn(f"case {record.case_id} is not among the {self.system.name} cases being scored: skipped")
                continue
            ours.append(record)
        by_id, doubled = latest_records(ours)
        for case_id in doubled:
            warn(f"case {case_id} appears more than once: the last record is scored")
        check_case_digests(cases, by_id, source)
        pending: list[tuple[ComponentScore, JudgeTask]] = []
        scores = []
        for case in cases:
            record = by_id.get(case["id"]) or CaseRecord.missing(case["id"], model, self.system.name)
            scores.append(self.score_case(case, record, pending))
        if pending and self.judge is not None:
            verdicts = self.judge.resolve([task for _, task in pending])
            for (entry, task), verdict in zip(pending, verdicts):
                entry.score = min(task.scale(verdict["score"]), entry.max)
                entry.reason = f"Judge: {verdict['reason']}"
        return scores

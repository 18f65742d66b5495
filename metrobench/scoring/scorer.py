"""Scoring a run: every applicable component of every case, one row each.

Which components a case has is decided by its ``scoring`` dict alone, except
four that every case gets (with a default maximum where the dict lacks them);
each score is clamped to its maximum (spec §7.2). Judged components are
collected over the whole run first and sent to the judge together, so a
concurrent backend is used fully and cached judgments cost nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metrobench.data.loader import SystemData, read_yaml
from metrobench.scoring.coerce import response_of, tool_calls_of
from metrobench.scoring.components import DETERMINISTIC, CaseView
from metrobench.scoring.judge import Judge
from metrobench.scoring.metrics import CaseTotals, Component, case_totals
from metrobench.scoring.rubrics import JUDGED, JudgeTask, judge_task, system_facts
from metrobench.transcripts.records import CaseRecord

#: Components in the order the reference adds them to a case's breakdown (sums follow it).
COMPONENTS: tuple[str, ...] = (
    "route_correct", "fare_correct", "tool_calls_correct", "no_tool_hallucination",
    "renderable_state_validity", "outcome_correct", "purchase_gate_correct",
    "fare_breakdown_correct", "passenger_summary_correct", "framebook_conformance",
    "disruption_detected", "advisory_issued", "advisory_content_correct",
    "accessibility_accuracy", "policy_acknowledged", "cultural_accuracy",
    "context_update_detected", "re_planning_efficiency", "safety_response_quality",
    "no_data_fabrication", "temporal_accuracy", "scope_adherence",
)
ORDER = {name: index for index, name in enumerate(COMPONENTS)}
TIER2 = frozenset({"framebook_conformance", "advisory_content_correct", "policy_acknowledged",
                   "temporal_accuracy", "safety_response_quality", "no_data_fabrication",
                   "accessibility_accuracy", "scope_adherence"})
#: Scored in every case, with these maxima where the case's scoring dict is silent.
ALWAYS: dict[str, float] = {"tool_calls_correct": 10, "no_tool_hallucination": 10,
                            "renderable_state_validity": 5, "framebook_conformance": 5}


def tier_of(component: str) -> int:
    return 2 if component in TIER2 else 1


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


def applicable(case: dict[str, Any]) -> list[tuple[str, float]]:
    """(component, max) for the components this case is scored on, in breakdown order."""
    scoring = case.get("scoring", {})
    out = []
    for name in COMPONENTS:
        if name in scoring:
            out.append((name, scoring[name]))
        elif name in ALWAYS:
            out.append((name, ALWAYS[name]))
    return out


class Scorer:
    """Scores records of one system against its cases."""

    def __init__(self, system: SystemData, *, errata: frozenset[str] = frozenset(),
                 judge: Judge | None = None) -> None:
        self.system = system
        self.errata = errata
        self.judge = judge
        framebook = read_yaml(system.directory / "framebook.yaml").get("framebook", {})
        self.facts = system_facts(framebook, system.fares_raw)

    def _view(self, case: dict[str, Any], record: CaseRecord) -> CaseView:
        framebook = self.system.framebook
        return CaseView(case=case, response=response_of(record.response),
                        raw_content=record.raw_content, calls=tool_calls_of(record.tool_calls_made),
                        currency_symbol=framebook.currency_symbol,
                        smartcard=framebook.terminology.smartcard, errata=self.errata)

    def score_case(self, case: dict[str, Any], record: CaseRecord,
                   pending: list[tuple[ComponentScore, JudgeTask]]) -> CaseScore:
        """Score one case; judge calls it needs are appended to ``pending``."""
        view = self._view(case, record)
        result = CaseScore(case["id"], case.get("category", ""), error=record.error)
        for name, maximum in applicable(case):
            if name in JUDGED:
                outcome = judge_task(name, case, view.response, view.text, view.calls, self.facts)
                if self.judge is None:
                    entry = ComponentScore(name, None, maximum, "not judged (--judge none)")
                elif isinstance(outcome, JudgeTask):
                    entry = ComponentScore(name, None, maximum, "", judged=True)
                    pending.append((entry, outcome))
                else:
                    raw, reason = outcome
                    entry = ComponentScore(name, min(raw, maximum), maximum, reason, judged=True)
            else:
                raw, reason = DETERMINISTIC[name](view)
                entry = ComponentScore(name, min(raw, maximum), maximum, reason)
            result.components.append(entry)
        return result

    def score(self, cases: Sequence[dict[str, Any]], records: Iterable[CaseRecord], *,
              model: str = "", warn=None) -> list[CaseScore]:
        """Score ``records`` against ``cases`` (case-file order); absent cases score as missing."""
        warn = warn or (lambda msg: print(f"metrobench: warning: {msg}", file=sys.stderr))
        by_id: dict[str, CaseRecord] = {}
        known = {case["id"] for case in cases}
        for record in records:
            if record.case_id not in known:
                warn(f"case {record.case_id} is not among the {self.system.name} cases being scored: skipped")
                continue
            if record.case_id in by_id:
                warn(f"case {record.case_id} appears more than once: the last record is scored")
            by_id[record.case_id] = record
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

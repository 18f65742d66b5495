"""The judges' ratings of a calibration sample: one 0/1/2 per pair and judge.

Contract: each pair is rated as the scorer would rate that answer on that rubric. The pair's
case comes from the benchmark, its answer is the pair's ``model_response`` (the submitted
state as JSON, else plain text) with its ``tool_calls_detail`` as the calls, and the rubric's
component (:mod:`metrobench.scoring.rubrics`) makes the judge's prompt, which goes through
:class:`~metrobench.scoring.judge.Judge` and its cache like any scoring call. The judge's
0/1/2 is the rating. Where the component needs no judge (an empty answer, no temporal ground
truth; ``cultural_accuracy``, which the scorer checks by keywords) its points are the rating,
normalised as the reference's analysis normalises a scorer's points: 0 -> 0, the maximum or
more -> 2, anything between -> 1.

The judges are the study's scoring judge (unless ``none``) and then ``calibration.judges``; each
is a ratings column named by its model id, so two judges of one model id are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.data.loader import Benchmark
from metrobench.errors import MetrobenchError
from metrobench.scoring.components import CaseView
from metrobench.scoring.judge import Judge, make_judge
from metrobench.scoring.registry import spec
from metrobench.scoring.rubrics import JudgeTask, operator_facts

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def normalise(points: float, maximum: float) -> int:
    """A component's points on the 0/1/2 rating scale (the reference's analysis)."""
    if points == 0:
        return 0
    return 2 if points >= maximum else 1


def _json_or_text(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def pair_view(pair: dict[str, Any], bench: Benchmark) -> CaseView:
    """The pair's case and answer as the scorer sees them."""
    case = bench.case(pair["case_id"]).raw
    data = bench.system(pair["system"])
    answer = _json_or_text(pair["model_response"])
    calls = [{"name": str(call.get("name", "")), "arguments": _json_or_text(call.get("arguments", {})),
              "result": _json_or_text(call.get("result"))}
             for call in pair.get("tool_calls_detail") or [] if isinstance(call, dict)]
    return CaseView(case=case, response=answer if isinstance(answer, dict) else None,
                    raw_content="" if isinstance(answer, dict) else pair["model_response"], calls=calls,
                    currency_symbol=data.framebook.currency_symbol, smartcard=data.framebook.terminology.smartcard,
                    facts=operator_facts(data.framebook_raw, data.fares_raw))


@dataclass
class Rated:
    """One judge's ratings of a sample: pair id -> 0/1/2, and how many it asked (not short cuts)."""

    judge: str
    ratings: dict[int, int]
    asked: int


def rate(pairs: Sequence[dict[str, Any]], judge: Judge, bench: Benchmark) -> Rated:
    """``judge``'s rating of every pair (module contract)."""
    ratings: dict[int, int] = {}
    pending: list[tuple[int, JudgeTask]] = []
    for pair in pairs:
        view = pair_view(pair, bench)
        outcome = spec(pair["rubric"]).function(view)
        if isinstance(outcome, JudgeTask):
            pending.append((pair["id"], outcome))
        else:
            points, _ = outcome
            ratings[pair["id"]] = normalise(points, view.maximum(pair["rubric"]))
    verdicts = judge.resolve([task for _, task in pending])
    for (pair_id, _), verdict in zip(pending, verdicts):
        ratings[pair_id] = int(verdict["score"])
    return Rated(judge.model, {pair["id"]: ratings[pair["id"]] for pair in pairs}, len(pending))


def judges_of(study: StudyConfig, cache: Path | None, concurrency: int = 4) -> list[Judge]:
    """The study's calibration judges, sharing one cache (module contract)."""
    scoring = study.scoring
    specs = [] if scoring.judge == "none" else [(scoring.judge, scoring.judge_model, scoring.judge_url,
                                                  scoring.judge_key_env)]
    specs += [(j.judge, j.model, j.url, j.key_env) for j in study.calibration.judges]
    judges = [make_judge(kind, model=model, base_url=url, api_key_env=key_env, cache_path=cache,
                         concurrency=concurrency) for kind, model, url, key_env in specs]
    found = [judge for judge in judges if judge is not None]
    names = [judge.model for judge in found]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise MetrobenchError(f"calibration.judges: {', '.join(doubled)} is listed twice (the scoring judge "
                              "counts): each judge is a ratings column named by its model id")
    if len(found) > 1:  # one cache file, one set of entries: every judge reads what the others wrote
        for judge in found[1:]:
            judge.cache = found[0].cache
    return found

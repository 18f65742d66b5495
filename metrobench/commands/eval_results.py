"""``results/eval/<model>/results.json``: one file saying what an ``eval`` ran and what it scored.

Contract: :class:`EvalResults` is the file's schema and its documentation (one pydantic model,
``extra="forbid"``); the JSON schema shipped in the package, ``metrobench/resources/
eval-results.schema.json``, is generated from it (``python -m metrobench.commands.eval_results
--schema``) and a test keeps the two equal. ``metrobench eval`` writes the file after it scores
(:func:`write_results`), over the systems of that call, as sorted-key, two-space-indented JSON with
no timestamp: the same run and scores give the same bytes. ``format`` changes only with an
incompatible change of the layout (a field removed or its meaning changed); fields may be added.

What it holds: the model, its settings fingerprint (the transcripts' ``config``) and endpoint
(``scheme://host[:port]`` only: never a key, a path or a query), the benchmark data's commit (the
pinned release; ``verified`` false with ``--no-verify``), the selection, the judge (``stand_in``
where it is the stand-in, whose grades are digests, not judgments), per-system and headline Tier 1
and composite (a bounded composite where Tier 2 was not judged) with 95 % bootstrap intervals of the
headline, case counts and endings, tokens, their cost where a study config prices the model (the
deployment table's arithmetic, :func:`metrobench.paper.deployment.record_cost`; None otherwise), the
published leaderboard's comparison, and the metrobench version.

The same file for a model of the workflow: ``metrobench results --config ... --model M`` (rule
``results_file``: ``results/models/<model>/results.json``, :func:`metrobench.layout.model_results`),
built by :func:`build` from the model's views of the config's ``bench.partition`` and their scores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from metrobench.vocabulary import is_whole

if TYPE_CHECKING:
    from metrobench.study import Price

FORMAT = 1
SCHEMA_RESOURCE = "eval-results.schema.json"
RESULTS_FILE = "results.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalModel(_Strict):
    name: str = Field(description="the model's name in metrobench (its transcripts' and scores' name)")
    provider: str = Field(description="openai, anthropic, llama_cpp, rule ...")
    model: str | None = Field(description="the model id sent to the endpoint (None: the provider's default)")
    fingerprint: str = Field(description="SHA-256 (16 hex) of the settings that shape its answers and the "
                                         "prompt: the transcripts' header.config")
    settings: dict[str, Any] = Field(description="the settings the fingerprint covers, as the transcripts record them")
    endpoint: str | None = Field(description="scheme://host[:port] of its base_url, nothing more; None: "
                                             "served by eval itself (llama-server) or the provider's default")


class EvalData(_Strict):
    repository: str = Field(description="the benchmark's public repository")
    commit: str = Field(description="the benchmark commit metrobench pins")
    verified: bool = Field(description="the data's SHA-256 digests were checked against the pin (not --no-verify)")


class EvalSelection(_Strict):
    systems: list[str] = Field(description="the systems of this eval, in the tables' order")
    partition: str = Field(description="holdout (the paper's headline), train or all")
    split: str | None = Field(description="the partition's digest (None: the default split)")
    sample: int | None = Field(description="--sample N: cases per system spread over categories (None: all)")
    cases: list[str] | None = Field(description="--cases, where given")
    limit: int | None = Field(description="--limit, where given")


class EvalJudge(_Strict):
    kind: str = Field(description="none (Tier 2 unjudged: composite bounded), anthropic or openai")
    model: str | None
    endpoint: str | None = Field(description="scheme://host[:port] of --judge-url, nothing more")
    stand_in: bool = Field(description="the judge stand-in (metrobench serve-standin judge): digests, not judgments")
    note: str | None = Field(description="what the composite rests on where it is not a real judge's grades")


class Scores(_Strict):
    cases: int = Field(description="cases scored")
    tier1: float = Field(description="Tier 1, percent (headline: the mean of the system means)")
    composite: float = Field(description="composite, percent; Tier 2 unjudged: its lower bound (counted 0)")
    composite_high: float | None = Field(description="Tier 2 unjudged: the upper bound (counted at its "
                                                     "maximum); None: judged, composite is exact")


class EvalInterval(_Strict):
    lo: float
    hi: float


class EvalHeadline(Scores):
    systems: int = Field(description="systems averaged")
    tier1_interval: EvalInterval = Field(description="95 % percentile bootstrap, resampling cases within systems")
    composite_interval: EvalInterval | None = Field(description="as tier1_interval; None where Tier 2 is unjudged")
    unjudged: int = Field(description="judged-component scores missing (--judge none)")
    missing: int = Field(description="cases absent from the runs, scored as failures")


class SystemRun(_Strict):
    cases: int = Field(description="cases in the system's view")
    endings: dict[str, int] = Field(description="cases per ending (answered, round_budget, token_limit, ...)")
    input_tokens: int
    output_tokens: int
    api_rounds: int


class EvalCost(_Strict):
    usd: float = Field(description="US dollars of the runs' tokens (every record of the views, as `tokens`) at "
                                   "the study config's price: input x input price + output x output price (+ "
                                   "reasoning apart where priced apart) per million tokens")
    usd_per_1k_cases: float = Field(description="usd per 1,000 of the views' records")
    prices_read: str = Field(description="the date the price was read (YYYY-MM-DD)")
    source: str = Field(description="where it was read (the price page's URL; empty: not said)")


class EvalPublished(_Strict):
    file_version: int = Field(description="the version of the package's published leaderboard (published.yaml)")
    holdout_cases: int = Field(description="the paper's held-out cases (Table 2's n)")
    comparable: bool = Field(description="scored on the paper's full held-out set, all systems: a like-for-like "
                                         "row of Table 2 (judge aside)")
    above: str | None = Field(description="the published row just above this model's place (None: first)")
    below: str | None = Field(description="the published ranked row just below (None: below every ranked row)")


class EvalResults(_Strict):
    """One ``eval``'s results: what ran, on which data, judged how, and its scores."""

    format: int = Field(description="the file's layout; changes only with an incompatible change")
    metrobench: str = Field(description="the metrobench version that wrote it")
    model: EvalModel
    data: EvalData
    selection: EvalSelection
    judge: EvalJudge
    headline: EvalHeadline
    systems: dict[str, Scores] = Field(description="per system: its scores")
    runs: dict[str, SystemRun] = Field(description="per system: its cases, endings and tokens")
    tokens: dict[str, int] = Field(description="input and output tokens over every system")
    cost: EvalCost | None = Field(None, description="the tokens' cost at the study config's `prices`; None: not "
                                                "priced (no study config, no matching entry, or a local model)")
    published: EvalPublished


def endpoint(url: str | None) -> str | None:
    """``scheme://host[:port]`` of ``url``: no user, password, path, query or fragment."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def schema() -> dict[str, Any]:
    return EvalResults.model_json_schema()


def shipped_schema() -> dict[str, Any]:
    from importlib import resources

    return json.loads(resources.files("metrobench.resources").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8"))


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _round(v: float | None) -> float | None:
    return None if v is None else round(float(v), 2)


def eval_scores(scores: Path, model: str, systems: list[str]):
    """The scores of ``model`` on these ``systems`` only: the scores folder may hold another system's
    scores from an earlier ``eval``, of another selection."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from metrobench.scoring.store import read_scores

    table = read_scores(scores, models=[model])
    return table.filter(pc.is_in(table.column("system"), value_set=pa.array(systems)))


def intervals(table, partition: str) -> tuple[tuple[float, float], tuple[float, float] | None]:
    """95 % bootstrap intervals of the headline (stratified by system: the mean of system means):
    Tier 1, and the composite where every judged component has a score (else None)."""
    import pyarrow.compute as pc

    from metrobench.scoring.store import totals_from_table
    from metrobench.stats.bootstrap import bootstrap_stratified

    rows = table if is_whole(partition) else table.filter(pc.equal(table.column("partition"), partition))
    by_system = next(iter(totals_from_table(rows, fill="zero").values()))
    groups = [by_system[s] for s in sorted(by_system)]
    t1 = bootstrap_stratified([[c.tier1_pct for c in g] for g in groups])
    judged = rows.filter(pc.is_null(rows.column("score"))).num_rows == 0
    comp = bootstrap_stratified([[c.pct for c in g] for g in groups]) if judged else None
    return (round(t1.lo, 2), round(t1.hi, 2)), None if comp is None else (round(comp.lo, 2), round(comp.hi, 2))


def entry(scores: Path, model: str, systems: list[str], partition: str, judge: str | None = None):
    """The model's row as :mod:`metrobench.paper.published` places it among the paper's: its headline
    (a bounded composite where Tier 2 was not judged), its cases and systems, its intervals."""
    from metrobench.paper.published import Entry
    from metrobench.scoring.summary import summarise

    table = eval_scores(scores, model, systems)
    s, = summarise(table, partition)
    t1_ci, comp_ci = intervals(table, partition)
    return Entry(model, round(s.low.composite, 2), round(s.low.tier1, 2),
                 composite_high=None if s.complete else round(s.high.composite, 2),
                 cases=s.low.n, systems=len(s.low.n_by_system), partition=partition,
                 interval=comp_ci, tier1_interval=t1_ci, judge=judge)


def cost_of(prices: Mapping[str, Price] | None, model: str, records: list[Any]) -> EvalCost | None:
    """The cost of ``records`` (a model's, every view's) at ``prices`` (a study config's), as the deployment
    table prices a hosted row; None: no prices, no match, or a local model."""
    from metrobench.paper.deployment import record_cost, run_price

    price = run_price(prices or {}, model, records)
    if price is None:
        return None
    usd = sum(record_cost(price, r) for r in records)
    return EvalCost(usd=round(usd, 6), usd_per_1k_cases=round(1000 * usd / len(records), 4),
                prices_read=str(price.read), source=price.source)


def build(*, cfg: Any, views: dict[str, Path], scores: Path, partition: str, judge: dict[str, Any],
          verified: bool, prices: Mapping[str, Price] | None = None) -> EvalResults:
    """The results of ``cfg`` from its views (system -> view file) and scores folder; ``prices``: the
    study config's, where there is one (the cost)."""
    from metrobench import __version__
    from metrobench.data.root import pinned_release
    from metrobench.paper.published import PUBLISHED, among_published, load_published, sample_note
    from metrobench.scoring.summary import summarise
    from metrobench.transcripts.records import ending, read_run

    systems = list(views)
    runs, headers, records = {}, {}, []
    for system, path in views.items():
        run = read_run(path)
        headers[system] = run.header
        records += run.records
        endings: dict[str, int] = {}
        for r in run.records:
            endings[ending(r)] = endings.get(ending(r), 0) + 1
        runs[system] = SystemRun(cases=len(run.records), endings=dict(sorted(endings.items())),
                                 input_tokens=sum(r.input_tokens for r in run.records),
                                 output_tokens=sum(r.output_tokens for r in run.records),
                                 api_rounds=sum(r.api_rounds for r in run.records))
    first = next(h for h in headers.values() if h is not None)
    fingerprints = sorted({h.config for h in headers.values() if h is not None and h.config})
    selection = dict(first.selection or {})
    table = eval_scores(scores, cfg.name, systems)
    s, = summarise(table, partition)
    t1_ci, comp_ci = intervals(table, partition)
    per_system = {name: Scores(cases=s.low.n_by_system[name], tier1=_round(s.low.tier1_by_system[name]),
                               composite=_round(s.low.composite_by_system[name]),
                               composite_high=None if s.complete else _round(s.high.composite_by_system[name]))
                  for name in systems if name in s.low.n_by_system}
    headline = EvalHeadline(cases=s.low.n, tier1=_round(s.low.tier1), composite=_round(s.low.composite),
                        composite_high=None if s.complete else _round(s.high.composite),
                        systems=len(s.low.n_by_system), tier1_interval=EvalInterval(lo=t1_ci[0], hi=t1_ci[1]),
                        composite_interval=None if comp_ci is None else EvalInterval(lo=comp_ci[0], hi=comp_ci[1]),
                        unjudged=s.unjudged, missing=s.missing)
    published = load_published()
    mine = entry(scores, cfg.name, systems, partition)
    rows = among_published([mine], published)
    i = rows.index(mine)
    above = next((r.label for r in reversed(rows[:i]) if r.source == PUBLISHED and not r.reference), None)
    below = next((r.label for r in rows[i + 1:] if r.source == PUBLISHED and not r.reference), None)
    release = pinned_release()
    return EvalResults(
        format=FORMAT, metrobench=__version__,
        model=EvalModel(name=cfg.name, provider=str(first.settings.get("provider") if first.settings else cfg.provider),
                    model=cfg.model, fingerprint=",".join(fingerprints) or cfg.fingerprint(),
                    settings=first.settings or {}, endpoint=endpoint(cfg.base_url)),
        data=EvalData(repository=release.repository, commit=release.commit, verified=verified),
        selection=EvalSelection(systems=systems, partition=selection.get("partition", partition),
                            split=selection.get("split"), sample=selection.get("sample"),
                            cases=selection.get("cases"), limit=selection.get("limit")),
        judge=EvalJudge(**judge),
        headline=headline, systems=per_system, runs=runs,
        tokens={"input": sum(r.input_tokens for r in runs.values()),
                "output": sum(r.output_tokens for r in runs.values())},
        cost=cost_of(prices, cfg.name, records),
        published=EvalPublished(file_version=published.version, holdout_cases=published.holdout_cases,
                            comparable=sample_note(mine, published) is None, above=above, below=below))


def judge_of(args: argparse.Namespace) -> dict[str, Any]:
    """The judge of ``eval``'s options (``--judge``, ``--judge-model``, ``--judge-url``)."""
    return judge_dict(args.judge, args.judge_model, args.judge_url)


def judge_dict(kind: str, model: str | None, url: str | None) -> dict[str, Any]:
    """:class:`EvalJudge`'s fields: the judge's kind, model and endpoint (never a key), stand-in or not."""
    from metrobench.paper.published import judge_note
    from metrobench.standins.judge import MODEL

    note = judge_note(kind, model)
    return {"kind": kind, "model": model, "endpoint": endpoint(url),
            "stand_in": kind == "openai" and model == MODEL,
            "note": note if note else "Tier 2 not judged: composite bounded" if kind == "none" else None}


def workflow_config(study: Any, model: str) -> Any:
    """The model config of a workflow run of ``model``: a configured model, one of its repeats, or a
    student seed (:func:`metrobench.run_job.run_config`, what its run job runs with)."""
    from metrobench.errors import MetrobenchError
    from metrobench.run_job import run_config

    try:
        return run_config(study, model)
    except MetrobenchError as exc:
        raise MetrobenchError(f"results: {exc}") from None


def workflow_results(study: Any, model: str, *, runs: Path, scores: Path, partition: str | None = None,
                     verified: bool) -> EvalResults:
    """The results of a workflow model: its views under ``runs`` (``<runs>/<model>/<system>.jsonl``, the
    config's systems), their scores under ``scores``, the config's judge (``scoring``) and prices."""
    from metrobench import layout
    from metrobench.data.root import SYSTEMS
    from metrobench.errors import MetrobenchError
    from metrobench.vocabulary import report_partition

    cfg = workflow_config(study, model)
    part = partition or study.bench.partition
    views = {s: Path(layout.run_file(str(runs), model, s)) for s in SYSTEMS if s in study.systems}
    absent = [str(p) for p in views.values() if not p.is_file()]
    if absent:
        raise MetrobenchError(f"results: no run {absent[0]} (the workflow's run of {model}: "
                              f"snakemake {absent[0]})")
    scoring = study.scoring
    return build(cfg=cfg, views=views, scores=Path(scores), partition=report_partition(part),
                 judge=judge_dict(scoring.judge, scoring.judge_model, scoring.judge_url), verified=verified,
                 prices=study.prices)


def write_results(results: EvalResults, folder: Path) -> Path:
    from metrobench.atomic import write_text

    path = Path(folder) / RESULTS_FILE
    write_text(path, dumps(results.model_dump(mode="json")))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrobench.commands.eval_results")
    parser.add_argument("--schema", action="store_true", help="print results.json's JSON schema")
    args = parser.parse_args(argv)
    if args.schema:
        sys.stdout.write(dumps(schema()))
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

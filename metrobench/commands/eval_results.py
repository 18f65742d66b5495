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
headline, case counts and endings, tokens, the published leaderboard's comparison, and the
metrobench version.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from metrobench.vocabulary import is_whole

FORMAT = 1
SCHEMA_RESOURCE = "eval-results.schema.json"
RESULTS_FILE = "results.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Model(_Strict):
    name: str = Field(description="the model's name in metrobench (its transcripts' and scores' name)")
    provider: str = Field(description="openai, anthropic, llama_cpp, rule ...")
    model: str | None = Field(description="the model id sent to the endpoint (None: the provider's default)")
    fingerprint: str = Field(description="SHA-256 (16 hex) of the settings that shape its answers and the "
                                         "prompt: the transcripts' header.config")
    settings: dict[str, Any] = Field(description="the settings the fingerprint covers, as the transcripts record them")
    endpoint: str | None = Field(description="scheme://host[:port] of its base_url, nothing more; None: "
                                             "served by eval itself (llama-server) or the provider's default")


class Data(_Strict):
    repository: str = Field(description="the benchmark's public repository")
    commit: str = Field(description="the benchmark commit metrobench pins")
    verified: bool = Field(description="the data's SHA-256 digests were checked against the pin (not --no-verify)")


class Selection(_Strict):
    systems: list[str] = Field(description="the systems of this eval, in the tables' order")
    partition: str = Field(description="holdout (the paper's headline), train or all")
    split: str | None = Field(description="the partition's digest (None: the default split)")
    sample: int | None = Field(description="--sample N: cases per system spread over categories (None: all)")
    cases: list[str] | None = Field(description="--cases, where given")
    limit: int | None = Field(description="--limit, where given")


class Judge(_Strict):
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


class Interval(_Strict):
    lo: float
    hi: float


class Headline(Scores):
    systems: int = Field(description="systems averaged")
    tier1_interval: Interval = Field(description="95 % percentile bootstrap, resampling cases within systems")
    composite_interval: Interval | None = Field(description="as tier1_interval; None where Tier 2 is unjudged")
    unjudged: int = Field(description="judged-component scores missing (--judge none)")
    missing: int = Field(description="cases absent from the runs, scored as failures")


class SystemRun(_Strict):
    cases: int = Field(description="cases in the system's view")
    endings: dict[str, int] = Field(description="cases per ending (answered, round_budget, token_limit, ...)")
    input_tokens: int
    output_tokens: int
    api_rounds: int


class Published(_Strict):
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
    model: Model
    data: Data
    selection: Selection
    judge: Judge
    headline: Headline
    systems: dict[str, Scores] = Field(description="per system: its scores")
    runs: dict[str, SystemRun] = Field(description="per system: its cases, endings and tokens")
    tokens: dict[str, int] = Field(description="input and output tokens over every system")
    published: Published


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


def build(*, cfg: Any, views: dict[str, Path], scores: Path, partition: str, judge: dict[str, Any],
          verified: bool) -> EvalResults:
    """The results of ``cfg`` from its eval's views (system -> view file) and scores folder."""
    from metrobench import __version__
    from metrobench.data.root import pinned_release
    from metrobench.paper.published import PUBLISHED, among_published, load_published, sample_note
    from metrobench.scoring.summary import summarise
    from metrobench.transcripts.records import ending, read_run

    systems = list(views)
    runs, headers = {}, {}
    for system, path in views.items():
        run = read_run(path)
        headers[system] = run.header
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
    headline = Headline(cases=s.low.n, tier1=_round(s.low.tier1), composite=_round(s.low.composite),
                        composite_high=None if s.complete else _round(s.high.composite),
                        systems=len(s.low.n_by_system), tier1_interval=Interval(lo=t1_ci[0], hi=t1_ci[1]),
                        composite_interval=None if comp_ci is None else Interval(lo=comp_ci[0], hi=comp_ci[1]),
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
        model=Model(name=cfg.name, provider=str(first.settings.get("provider") if first.settings else cfg.provider),
                    model=cfg.model, fingerprint=",".join(fingerprints) or cfg.fingerprint(),
                    settings=first.settings or {}, endpoint=endpoint(cfg.base_url)),
        data=Data(repository=release.repository, commit=release.commit, verified=verified),
        selection=Selection(systems=systems, partition=selection.get("partition", partition),
                            split=selection.get("split"), sample=selection.get("sample"),
                            cases=selection.get("cases"), limit=selection.get("limit")),
        judge=Judge(**judge),
        headline=headline, systems=per_system, runs=runs,
        tokens={"input": sum(r.input_tokens for r in runs.values()),
                "output": sum(r.output_tokens for r in runs.values())},
        published=Published(file_version=published.version, holdout_cases=published.holdout_cases,
                            comparable=sample_note(mine, published) is None, above=above, below=below))


def judge_of(args: argparse.Namespace) -> dict[str, Any]:
    from metrobench.paper.published import judge_note
    from metrobench.standins.judge import MODEL

    note = judge_note(args.judge, args.judge_model)
    return {"kind": args.judge, "model": args.judge_model, "endpoint": endpoint(args.judge_url),
            "stand_in": args.judge == "openai" and args.judge_model == MODEL,
            "note": note if note else "Tier 2 not judged: composite bounded" if args.judge == "none" else None}


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

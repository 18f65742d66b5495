"""What each leaderboard row costs to run, from its transcripts; and quality against that cost.

The deployment table (``results/deployment.csv``, :func:`deployment`) has one row per
leaderboard row that is not a reference line (a student group pools its seeds' runs), over
the cases it ran (every record of ``<runs>/<model>/*.jsonl`` except the endpoint's failures,
which a rerun redoes), read from the records, never from the config:

* tokens per case, mean and 95th percentile: ``prompt_tokens`` (``input_tokens``),
  ``completion_tokens`` (``output_tokens``, reasoning included) and ``reasoning_tokens``
  (``meta.reasoning_tokens``, where the endpoint reported them; empty where no record has them);
* seconds per case (``e2e_ms``) and per round (a case's ``e2e_ms / api_rounds``), p50 and p95;
* local rows (served by llama.cpp: ``meta.serving`` names a GGUF, or the provider is
  ``llama_cpp``): ``gguf_bytes``, the size on disk of the served file (a student's Q4_K_M
  GGUF, else the model config's ``serving.gguf`` or packaged GGUF: the registry resolves it,
  :class:`~metrobench.paper.inputs.Footprint`), taken only when its name is the one the
  records' serving record names, else the student's ``gguf_sizes.json``; ``served_on``
  (``gpu`` when layers were offloaded, else ``cpu``) and
  ``gpu_s_per_case``: the server's seconds per case, the mean of ``meta.model_ms`` over its
  slots (``serving.parallel``) — the device time a case holds when the slots are kept busy
  (on a CPU-only server, its cores' time);
* hosted rows: ``usd_per_1k_cases`` from the config's ``prices`` (the model's name or its
  endpoint id, the first matching key or fnmatch pattern): per case ``input x input price +
  (completion - reasoning) x output price + reasoning x reasoning price`` per million tokens
  (no reasoning price, or no reasoning count: reasoning tokens are output tokens), and
  ``prices_read``, the date the prices were read. No price: both empty, never guessed.

The judge is counted apart: one ``kind: judge`` row per judge model in the judge cache
(``<scores>.judge-cache.jsonl``), over its judgments (``cases``: the judgments it was paid
for), tokens from each entry's ``usage`` (recorded since the judge kept it; empty for older
entries) and ``usd_per_1k_cases`` per 1,000 judgments.

:func:`quality_cost` puts each row's held-out Tier 1, with its bootstrap interval (the
headline statistic of Table 9: the mean of system means, resampled within systems), beside
its footprint (local: GGUF bytes) or cost (hosted: USD per 1,000 cases), and marks the
Pareto front of each (:func:`pareto_front`); Figure ``figure-deployment`` draws it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metrobench.errors import MetrobenchError
from metrobench.paper.protocol import model_records
from metrobench.transcripts.records import INFRASTRUCTURE, CaseRecord, ending_kind

if TYPE_CHECKING:
    from metrobench.paper.inputs import Footprint, Model, Resampling, Row
    from metrobench.stats.cases import Cases
    from metrobench.study import Price

COLUMNS = ("model", "kind", "cases",
           "prompt_tokens_mean", "prompt_tokens_p95", "completion_tokens_mean", "completion_tokens_p95",
           "reasoning_tokens_mean", "reasoning_tokens_p95",
           "case_s_p50", "case_s_p95", "round_s_p50", "round_s_p95",
           "gguf_bytes", "served_on", "gpu_s_per_case", "usd_per_1k_cases", "prices_read")
QUALITY_COLUMNS = ("model", "kind", "tier1", "tier1_lo", "tier1_hi", "gguf_bytes", "usd_per_1k_cases", "pareto")
LOCAL, HOSTED, JUDGE = "local", "hosted", "judge"
Runs = dict[str, list[CaseRecord]]  # model -> its records
MILLION = 1_000_000


def judge_cache_path(scores: Path) -> Path:
    """The judge cache ``metrobench score --out DIR`` keeps beside its scores: ``DIR.judge-cache.jsonl``."""
    scores = Path(scores)
    return scores.with_name(scores.name + ".judge-cache.jsonl")


def _stats(values: Sequence[float | None], stat: str, digits: int) -> float | None:
    """Mean, p50 or p95 of the known values (None: none known)."""
    known = np.array([v for v in values if v is not None], dtype=float)
    if known.size == 0:
        return None
    value = known.mean() if stat == "mean" else np.percentile(known, 50 if stat == "p50" else 95)
    return round(float(value), digits)


def _spread(prefix: str, values: Sequence[float | None], stats: tuple[str, str], digits: int) -> dict[str, Any]:
    return {f"{prefix}_{stat}": _stats(values, stat, digits) for stat in stats}


def price_of(prices: dict[str, Price], *names: str | None) -> Price | None:
    """The first ``prices`` entry whose key is, or as an fnmatch pattern matches, one of ``names``."""
    for name in (n for n in names if n):
        for key, price in prices.items():
            if key == name or fnmatch.fnmatchcase(name, key):
                return price
    return None


def case_cost(price: Price, prompt: int, completion: int, reasoning: int | None) -> float:
    """USD of one case's tokens at ``price`` (reasoning billed as output without its own price or count)."""
    apart = reasoning if reasoning is not None and price.reasoning is not None else 0
    return (prompt * price.input + (completion - apart) * price.output
            + apart * (price.reasoning or 0.0)) / MILLION


def _reasoning(record: CaseRecord) -> int | None:
    value = record.meta.get("reasoning_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_cost(price: Price, record: CaseRecord) -> float:
    """USD of one record's tokens at ``price`` (:func:`case_cost` of its counts)."""
    return case_cost(price, record.input_tokens, record.output_tokens, _reasoning(record))


def run_price(prices: Mapping[str, Price], model: str, records: Sequence[CaseRecord]) -> Price | None:
    """The price of a hosted model's records: the first ``prices`` entry matching its name or the
    endpoint's model id (its records' settings); None for a local run (served by llama.cpp), a run
    without records, or no match."""
    if not records or served_locally(list(records)):
        return None
    return price_of(dict(prices), model, (records[0].meta.get("settings") or {}).get("model"))


def token_columns(prompt: list[int], completion: list[int], reasoning: list[int | None]) -> dict[str, Any]:
    """Tokens per case (or per judgment): mean and p95 of each count."""
    both = ("mean", "p95")
    return {**_spread("prompt_tokens", prompt, both, 1), **_spread("completion_tokens", completion, both, 1),
            **_spread("reasoning_tokens", reasoning, both, 1)}


def time_columns(records: list[CaseRecord]) -> dict[str, Any]:
    """Seconds per case and per round (a case's wall time over its rounds), p50 and p95."""
    mid = ("p50", "p95")
    rounds = [r.e2e_ms / 1000 / r.api_rounds for r in records if r.api_rounds]
    return {**_spread("case_s", [r.e2e_ms / 1000 for r in records], mid, 3), **_spread("round_s", rounds, mid, 3)}


def served_locally(records: list[CaseRecord]) -> bool:
    """Served here by llama.cpp: the serving record names a GGUF, or the provider is llama_cpp."""
    first = records[0].meta
    return bool((first.get("serving") or {}).get("gguf")) or (first.get("settings") or {}).get("provider") == \
        "llama_cpp"


def gguf_bytes(footprint: Footprint | None, served: str | None) -> int | None:
    """Bytes on disk of the file the records were served from (its name checked), else the student's sizes."""
    path = footprint.gguf if footprint is not None else None
    if path is not None and path.is_file() and (served is None or path.name == served):
        return path.stat().st_size
    if footprint is None or footprint.sizes is None:
        return None
    from metrobench.paper.tables import gguf_size

    return gguf_size(footprint.sizes)


def local_columns(runs: Runs, footprints: Mapping[str, Footprint]) -> dict[str, Any]:
    """GGUF bytes (mean over a group's seeds), where it was served, server seconds per case."""
    sizes, seconds, gpu = [], [], False
    for model, records in runs.items():
        serving = records[0].meta.get("serving") or {}
        size = gguf_bytes(footprints.get(model), serving.get("gguf"))
        if size is not None:
            sizes.append(size)
        gpu = gpu or bool(serving.get("n_gpu_layers"))
        slots = max(1, int(serving.get("parallel") or 1))
        timed = [r.meta["model_ms"] for r in records if isinstance(r.meta.get("model_ms"), (int, float))]
        seconds += [ms / 1000 / slots for ms in timed]
    return {"gguf_bytes": int(np.mean(sizes)) if sizes else None, "served_on": "gpu" if gpu else "cpu",
            "gpu_s_per_case": _stats(seconds, "mean", 3)}


def hosted_columns(runs: Runs, prices: Mapping[str, Price]) -> dict[str, Any]:
    """USD per 1,000 cases at the config's prices, and the date they were read (empty: not priced)."""
    costs: list[float] = []
    dates: set[str] = set()
    for model, records in runs.items():
        price = price_of(prices, model, (records[0].meta.get("settings") or {}).get("model"))
        if price is None:
            return {"usd_per_1k_cases": None, "prices_read": None}
        dates.add(str(price.read))
        costs += [record_cost(price, r) for r in records]
    return {"usd_per_1k_cases": round(1000 * float(np.mean(costs)), 4), "prices_read": "/".join(sorted(dates))}


def model_row(label: str, runs: Runs, footprints: Mapping[str, Footprint],
              prices: Mapping[str, Price]) -> dict[str, Any]:
    """One leaderboard row's columns, over the records of its models (a group's seeds pooled)."""
    records = [r for rs in runs.values() for r in rs]
    local = served_locally(records)
    row: dict[str, Any] = {"model": label, "kind": LOCAL if local else HOSTED, "cases": len(records),
                           **token_columns([r.input_tokens for r in records], [r.output_tokens for r in records],
                                           [_reasoning(r) for r in records]),
                           **time_columns(records)}
    row.update(local_columns(runs, footprints) if local else hosted_columns(runs, prices))
    return row


def judge_rows(cache: Path, prices: Mapping[str, Price]) -> list[dict[str, Any]]:
    """One row per judge model in the judge cache: its judgments, tokens and cost per 1,000 judgments."""
    from metrobench.scoring.judge import JudgeCache

    if not cache.is_file():
        return []
    by_model: dict[str, list[dict[str, Any]]] = {}
    for entry in JudgeCache(cache).entries.values():
        by_model.setdefault(str(entry.get("judge_model") or "judge"), []).append(entry)
    rows = []
    for judge, entries in by_model.items():
        used = [e["usage"] for e in entries if isinstance(e.get("usage"), dict)]
        prompt = [int(u.get("input_tokens") or 0) for u in used]
        completion = [int(u.get("output_tokens") or 0) for u in used]
        price = price_of(prices, judge)
        cost = None if price is None or not used else round(
            1000 * float(np.mean([case_cost(price, p, c, None) for p, c in zip(prompt, completion)])), 4)
        rows.append({"model": judge, "kind": JUDGE, "cases": len(entries),
                     **token_columns(prompt, completion, []), "usd_per_1k_cases": cost,
                     "prices_read": str(price.read) if cost is not None else None})
    return rows


def leaderboard_runs(rows: Sequence[Row], runs_dir: Path) -> tuple[list[tuple[str, Runs]], list[str]]:
    """(label, {model: its records}) per non-reference leaderboard row with runs (a group: each seed's
    models; a repeated model: its first run); and the rows without."""
    out, missing = [], []
    for row in rows:
        if row.reference:
            continue
        runs: dict[str, list[CaseRecord]] = {}
        for model in row.model.seeds:
            try:
                records = [r for r in model_records(runs_dir, model) if ending_kind(r) != INFRASTRUCTURE]
            except MetrobenchError:
                continue
            if records:
                runs[model] = records
        if runs:
            out.append((row.shown, runs))
        else:
            missing.append(row.model.name)
    return out, missing


def deployment(rows: Sequence[Row], runs: Path, footprints: Mapping[str, Footprint], prices: Mapping[str, Price],
               judge_cache: Path | None = None) -> pd.DataFrame:
    """The deployment table (see the module docstring) of the leaderboard's ``rows``, from their
    transcripts under ``runs`` (``<runs>/<model>/<system>.jsonl``), the files they were served from
    (``footprints``, by model) and ``prices``; the judge's rows from ``judge_cache``, when given."""
    from metrobench.paper.tables import Skip

    found, missing = leaderboard_runs(rows, runs)
    if not found:
        raise Skip(f"deployment: no runs for {', '.join(missing) or 'any leaderboard row'}")
    out = [model_row(label, model_runs, footprints, prices) for label, model_runs in found]
    if judge_cache is not None:
        out += judge_rows(judge_cache, prices)
    frame = pd.DataFrame(out, columns=list(COLUMNS))
    frame["cases"] = frame["cases"].astype("Int64")
    frame["gguf_bytes"] = frame["gguf_bytes"].astype("Int64")
    return frame


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which (cost, quality) points no other point beats: cost as low or lower and quality as high or
    higher, one of the two strictly."""
    return [not any(cx <= x and cy >= y and (cx < x or cy > y) for cx, cy in points) for x, y in points]


def tier1_interval(cases: Cases, model: Model, resampling: Resampling) -> tuple[float, float, float]:
    """Held-out Tier 1 (mean of system means; a group's seeds averaged per case) and its 95% interval."""
    from metrobench.paper.tables import per_case
    from metrobench.stats.bootstrap import bootstrap_stratified

    groups: dict[str, list[float]] = {}
    for case_id, value in per_case(cases, model, "holdout", "tier1").items():
        groups.setdefault(case_id.split("-")[0], []).append(value)
    interval = bootstrap_stratified(list(groups.values()), n_resamples=resampling.n_resamples,
                                    seed=resampling.seed)
    return round(interval.estimate, 2), round(interval.lo, 2), round(interval.hi, 2)


def quality_cost(cases: Cases, rows: Sequence[Row], runs: Path, footprints: Mapping[str, Footprint],
                 prices: Mapping[str, Price], resampling: Resampling) -> pd.DataFrame:
    """Held-out Tier 1 with its interval beside each row's footprint or cost (the deployment table's
    inputs, the judge apart); the Pareto front per kind."""
    from metrobench.paper.tables import Skip

    table = deployment(rows, runs, footprints, prices)
    labels = {row.shown: row.model for row in rows if not row.reference}
    scored = set(cases.models())
    out = []
    for item in table.itertuples(index=False):
        model = labels[item.model]
        if not all(m in scored for m in model.seeds):
            continue
        tier1, lo, hi = tier1_interval(cases, model, resampling)
        out.append({"model": item.model, "kind": item.kind, "tier1": tier1, "tier1_lo": lo, "tier1_hi": hi,
                    "gguf_bytes": item.gguf_bytes, "usd_per_1k_cases": item.usd_per_1k_cases})
    if not out:
        raise Skip("quality_cost: no leaderboard row has both runs and scores")
    frame = pd.DataFrame(out, columns=list(QUALITY_COLUMNS))
    frame["pareto"] = False
    for kind, x in ((LOCAL, "gguf_bytes"), (HOSTED, "usd_per_1k_cases")):
        known = frame.index[(frame["kind"] == kind) & frame[x].notna()]
        points = [(float(frame.at[i, x]), float(frame.at[i, "tier1"])) for i in known]
        frame.loc[known, "pareto"] = pareto_front(points)
    frame["gguf_bytes"] = frame["gguf_bytes"].astype("Int64")
    return frame

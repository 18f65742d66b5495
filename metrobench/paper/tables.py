"""The paper's tables from Parquet scores and the resolved study, as CSV and Markdown.

Each builder returns a pandas DataFrame, or raises :class:`Skip` naming what is
missing (models without scores, training runs not done), so ``metrobench
tables`` writes every table the present results allow. Headline numbers are
the mean of the six system means (spec §7.5); per-category numbers and the
bootstrap point estimates of Table 9 are pooled case means (spec §10).

The CSV holds every column the project computes; the Markdown beside it
(:func:`write_table` with the table's name) is the table as the paper prints it
(:mod:`metrobench.paper.markdown`).

A builder takes what it reads and nothing more, as the table registry
(:mod:`metrobench.paper.registry`) resolves it from the study config: models as
:class:`~metrobench.paper.inputs.Model` (a student group is its seeds, a model with
``repeats: k`` its k runs: its numbers are the mean over them, and the bootstraps of
Tables 9 and 10 resample its runs with its cases, :mod:`metrobench.stats.bootstrap`),
the leaderboard's rows (``reference`` rows, the rule baseline, are shown below the
ranks and never ranked), the student sizes with their seeds' files, the bootstrap's
settings, and the folders and files it reads. :func:`repeats` is the run-to-run table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metrobench.layout import QUANTIZED_GGUF
from metrobench.paper.markdown import PUBLISHED_COLUMN, grid, markdown
from metrobench.stats.bootstrap import (
    bootstrap,
    bootstrap_stratified,
    holm,
    paired_bootstrap,
    runs_by_case,
    seed_mean,
    seed_spread,
)
from metrobench.stats.cases import Cases
from metrobench.vocabulary import CATEGORIES, WHOLE_IN_REPORTS

if TYPE_CHECKING:
    from metrobench.paper.inputs import Cell, Model, Printed, Resampling, Row, Seed, StudentGroup


class Skip(Exception):
    """A table that the present results cannot fill; the message says what is missing."""


def _need(cases: Cases, models: Iterable[str], table: str) -> None:
    missing = [m for m in models if m not in set(cases.models())]
    if missing:
        raise Skip(f"{table}: no scores for {', '.join(missing)}")


def headline_pair(cases: Cases, model: str, partition: str) -> tuple[float, float, float]:
    """(Tier 1, composite low, composite high) headline of one model."""
    low = cases.headline(model, partition, "zero")
    high = cases.headline(model, partition, "max")
    return low.tier1, low.composite, high.composite


def group_headline(cases: Cases, model: Model, partition: str) -> tuple[float, float, float, int]:
    """The mean headline over a model's runs, and how many seeds it pools."""
    _need(cases, model.runs, model.name)
    values = np.array([headline_pair(cases, m, partition) for m in model.runs])
    return (*values.mean(axis=0).tolist(), len(model.seeds))


def normal_endings(cases: Cases, model: str) -> float:
    m = cases.model == model
    return float(cases.ended[m].mean()) if m.any() else float("nan")


def table2(cases: Cases, rows: Sequence[Row], min_normal_endings: float, runs: Path | None = None) -> pd.DataFrame:
    """Leaderboard (held-out): composite, Tier 1.

    Ranked rows first (composite, then Tier 1, descending), then the rows below the
    termination rule (fewer than ``min_normal_endings`` of a row's cases end without a
    harness error: unranked), then the reference lines (``reference``, the rule baseline:
    the paper's "Rule-based baseline: 77.1, 84.6" below the ranks). With ``runs`` (the
    benchmark view's transcripts, ``<runs>/<model>/<system>.jsonl``), a row whose runs
    disagree on their settings (one system run under an edited config, another not) is
    refused, naming the model, the systems and the field (:mod:`metrobench.paper.run_settings`).
    ``holdout_cases``: the held-out cases a row's numbers rest on (a group: its run with fewest), so
    that a sampled row (``bench: {sample: N}``) says it is one beside the paper's 238.
    """
    if not rows:
        raise Skip("table2: no leaderboard in the config")
    if runs is not None:
        from metrobench.paper.run_settings import check_runs_agree

        check_runs_agree(runs, [m for row in rows for m in row.model.runs])
    present = set(cases.models())
    out, missing = [], []
    for row in rows:
        members = row.model.runs
        if not all(m in present for m in members):
            missing.append(row.model.name)
            continue
        t1, low, high, n_seeds = group_headline(cases, row.model, "holdout")
        endings = min(normal_endings(cases, m) for m in members)
        judged = all(cases.unjudged.get(m, 0) == 0 for m in members)
        holdout_cases = min(int(cases.mask(m, "holdout").sum()) for m in members)
        out.append({"model": row.model.name if row.label is None else row.label, "licence": row.licence,
                    "vendor": row.vendor, "composite": round(low, 2),
                    "composite_upper": round(high, 2) if not judged else round(low, 2),
                    "judged": judged, "tier1": round(t1, 2), "seeds": n_seeds,
                    "normal_endings_pct": round(100 * endings, 1),
                    "ranked": endings >= min_normal_endings and not row.reference, "reference": row.reference,
                    "holdout_cases": holdout_cases})
    if not out:
        raise Skip(f"table2: no scores for {', '.join(missing)}")
    frame = pd.DataFrame(out)
    frame["_block"] = [2 if ref else 0 if ranked else 1 for ranked, ref in zip(frame["ranked"], frame["reference"])]
    frame = frame.sort_values(["_block", "composite", "tier1"], ascending=[True, False, False], kind="stable")
    frame = frame.drop(columns="_block")
    frame.insert(0, "rank", [i + 1 if r else None for i, r in enumerate(frame["ranked"])])
    frame["rank"] = frame["rank"].astype("Int64")
    return frame.reset_index(drop=True)


def table3(cases: Cases, cells: Sequence[Cell]) -> pd.DataFrame:
    """Serving-configuration sensitivity: held-out Tier 1 per (decoding, model) cell."""
    if not cells:
        raise Skip("table3: no serving variants (sensitivity) in the config")
    _need(cases, [c.model for c in cells], "table3")
    frame = pd.DataFrame([{"setting": c.row, "column": c.column,
                           "tier1": round(headline_pair(cases, c.model, "holdout")[0], 2)} for c in cells])
    table = frame.pivot(index="setting", columns="column", values="tier1")
    return table.reindex(index=list(dict.fromkeys(c.row for c in cells)),
                         columns=list(dict.fromkeys(c.column for c in cells))).reset_index()


def gguf_size(sizes: Path) -> int | None:
    """The Q4_K_M GGUF's bytes as a seed's ``gguf_sizes.json`` records them (None: not exported yet)."""
    if not sizes.is_file():
        return None
    return json.loads(sizes.read_text()).get(QUANTIZED_GGUF)


def _made_by(seeds: Sequence[Seed]) -> str | None:
    """Which llama.cpp converted and quantised a size's GGUFs (``gguf_sizes.json``), over its seeds."""
    from metrobench.training.export import LLAMA_CPP_KEY

    found = []
    for seed in seeds:
        path = seed.gguf_sizes
        made = json.loads(path.read_text()).get(LLAMA_CPP_KEY) if path.is_file() else None
        if made and made not in found:
            found.append(made)
    return " + ".join(found) or None


def _published(cases: Cases, students: Sequence[StudentGroup]) -> dict[str, float | None] | None:
    """Size -> held-out Tier 1 of the paper's released student (None: not scored); None: none named."""
    named = {s.size: s.published for s in students if s.published}
    if not named:
        return None
    present = set(cases.models())
    return {s.size: round(headline_pair(cases, named[s.size], "holdout")[0], 2)
            if named.get(s.size) in present else None for s in students}


def table4(cases: Cases, students: Sequence[StudentGroup]) -> pd.DataFrame:
    """PEFT sweep: held-out Tier 1 of base and each seed, mean, delta, seed spread, GGUF size
    (each seed's ``gguf_sizes.json``).

    Where a size names the paper's released student (``published``), a last column
    ``published_s42`` holds its held-out Tier 1 (blank while it has no scores).
    """
    if not students:
        raise Skip("table4: no students in the config")
    needed = [s.base_model for s in students] + [seed.model for s in students for seed in s.seeds]
    _need(cases, needed, "table4")
    all_seeds = sorted({seed.seed for s in students for seed in s.seeds})
    published = _published(cases, students)
    rows = []
    for student in students:
        base = headline_pair(cases, student.base_model, "holdout")[0]
        base_full = headline_pair(cases, student.base_model, WHOLE_IN_REPORTS)[0]
        per_seed = {s.seed: headline_pair(cases, s.model, "holdout")[0] for s in student.seeds}
        full = [headline_pair(cases, s.model, WHOLE_IN_REPORTS)[0] for s in student.seeds]
        mean = float(np.mean(list(per_seed.values())))
        row: dict[str, Any] = {"size": student.size, "base_tier1": round(base, 2)}
        for s in all_seeds:
            row[f"s{s}"] = round(per_seed[s], 2) if s in per_seed else None
        sizes = [x for x in (gguf_size(s.gguf_sizes) for s in student.seeds) if x]
        row.update({"mean": round(mean, 2), "delta": round(mean - base, 2),
                    "seed_spread": round(seed_spread(list(per_seed.values())), 2),
                    "delta_full": round(float(np.mean(full)) - base_full, 2),
                    "q4_k_m_gguf_bytes": int(np.mean(sizes)) if sizes else None})
        if published is not None:
            row[PUBLISHED_COLUMN] = published[student.size]
        rows.append(row)
    return pd.DataFrame(rows)


def table7(composition: Path) -> pd.DataFrame:
    """The training set's composition, as the teacher's filter wrote it beside the dataset."""
    if not composition.is_file():
        raise Skip(f"table7: {composition} not built yet")
    return pd.read_csv(composition, keep_default_na=False)


#: The paper's adapters per size as Table 8 prints them (MB, decimal; /work/shared/paper-tables.md):
#: fp32 LoRA weights, rank-16 parameters x 4 bytes (305 MB at 27B: ~76 M parameters).
PAPER_ADAPTER_BYTES = {"2b": 42_000_000, "4b": 100_000_000, "9b": 150_000_000, "27b": 305_000_000}


def _adapter_dtypes(metrics: list[dict[str, Any]]) -> str | None:
    """The LoRA weights' dtypes over the seeds ("float32"; "bfloat16+float32" if they differ); None before
    training recorded them."""
    found = sorted({d for m in metrics for d in m.get("adapter_dtypes") or []})
    return "+".join(found) or None


def table8(students: Sequence[StudentGroup]) -> pd.DataFrame:
    """Per size: max sequence length, training time per seed, adapter and Q4_K_M sizes, from each
    seed's training metrics and ``gguf_sizes.json``.

    Beside the adapter's bytes on disk (the mean over seeds), its LoRA parameter count and
    dtypes as training recorded them, and ``paper_adapter_bytes``, the paper's adapter of
    that size (:data:`PAPER_ADAPTER_BYTES`; empty for a size the paper has not): an fp32
    adapter is about parameters x 4 bytes, a bf16 one half the paper's. ``gguf_llama_cpp`` says
    which llama.cpp converted and quantised the GGUFs (the build that serves them, by default).
    """
    rows, missing = [], []
    for student in students:
        metrics = []
        for s in student.seeds:
            if s.train_metrics.is_file():
                metrics.append(json.loads(s.train_metrics.read_text()))
            else:
                missing.append(f"{student.size}/seed{s.seed}")
        if not metrics:
            continue
        sizes = [x for x in (gguf_size(s.gguf_sizes) for s in student.seeds) if x]
        rows.append({"size": student.size, "max_seq": metrics[0]["recipe"]["max_length"],
                     "minutes_per_seed": round(float(np.mean([m["wall_s"] for m in metrics])) / 60, 1),
                     "adapter_bytes": int(np.mean([m["adapter_bytes"] for m in metrics])),
                     "adapter_params": metrics[0].get("adapter_params"), "adapter_dtypes": _adapter_dtypes(metrics),
                     "paper_adapter_bytes": PAPER_ADAPTER_BYTES.get(student.size),
                     "q4_k_m_gguf_bytes": int(np.mean(sizes)) if sizes else None,
                     "gguf_llama_cpp": _made_by(student.seeds), "seeds": len(metrics)})
    if not rows:
        raise Skip(f"table8: no training metrics ({', '.join(missing) or 'no students'})")
    return pd.DataFrame(rows)


def _runs(cases: Cases, model: Model, partition: str, metric: str) -> dict[str, list[float]]:
    """Per case, the model's value in each of its runs (a student group's seeds averaged), over the
    cases every run has: one value per case unless the model has ``repeats``."""
    _need(cases, model.runs, model.name)
    return runs_by_case([seed_mean([cases.by_case(m, partition, metric) for m in repeat])
                         for repeat in model.by_repeat])


def per_case(cases: Cases, model: Model, partition: str, metric: str) -> dict[str, float]:
    """Per case, the mean over the model's seeds and runs."""
    return {c: float(np.mean(v)) for c, v in _runs(cases, model, partition, metric).items()}


def table9(cases: Cases, models: Sequence[Model], resampling: Resampling,
           partition: str = WHOLE_IN_REPORTS) -> pd.DataFrame:
    """Bootstrap CIs of Tier 1 and composite per model, two statistics.

    ``pooled``: the mean over cases, resampling cases (the paper's Table 9);
    ``headline``: the mean of the system means, resampling within systems (the
    statistic of the leaderboard, so its estimate is the headline number).
    """
    if not models:
        raise Skip("table9: no model benchmarked (no leaderboard, models or stats.bootstrap_models)")
    n_resamples, seed = resampling.n_resamples, resampling.seed
    rows = []
    for model in models:
        per = {m: (_runs(cases, model, partition, m)) for m in ("tier1", "composite")}
        for statistic in ("pooled", "headline"):
            row: dict[str, Any] = {"model": model.name, "partition": partition, "statistic": statistic}
            for metric, values in per.items():
                if statistic == "pooled":
                    interval = bootstrap(list(values.values()), n_resamples=n_resamples, seed=seed)
                else:
                    groups: dict[str, list[list[float]]] = {}
                    for case_id, v in values.items():
                        groups.setdefault(case_id.split("-")[0], []).append(v)
                    interval = bootstrap_stratified(list(groups.values()), n_resamples=n_resamples, seed=seed)
                row.update({"n": interval.n, metric: round(interval.estimate, 2),
                            f"{metric}_lo": round(interval.lo, 2), f"{metric}_hi": round(interval.hi, 2)})
            rows.append(row)
    return pd.DataFrame(rows)


def table10(cases: Cases, pairs: Sequence[tuple[Model, Model]], resampling: Resampling) -> pd.DataFrame:
    """Paired bootstrap of the configured comparisons (a - b), held-out and full, with Holm-adjusted p."""
    if not pairs:
        raise Skip("table10: no comparisons in the config")
    n_resamples, seed = resampling.n_resamples, resampling.seed
    rows = []
    for partition in ("holdout", WHOLE_IN_REPORTS):
        for a, b in pairs:
            for metric in ("tier1", "composite"):
                interval, p = paired_bootstrap(_runs(cases, a, partition, metric),
                                               _runs(cases, b, partition, metric),
                                               n_resamples=n_resamples, seed=seed)
                # + 0.0: a difference of equal means over repeats may round to -0.0; a table prints 0.0
                rows.append({"a": a.name, "b": b.name, "partition": partition, "metric": metric, "n": interval.n,
                             "delta": round(interval.estimate, 2) + 0.0, "lo": round(interval.lo, 2) + 0.0,
                             "hi": round(interval.hi, 2) + 0.0, "excludes_zero": interval.excludes_zero(),
                             "p": p})
    frame = pd.DataFrame(rows)
    frame["p_holm"] = holm(frame["p"].tolist())
    return frame


def protocol(runs: Path, models: Sequence[str]) -> pd.DataFrame:
    """How each model uses the kiosk protocol (:mod:`metrobench.paper.protocol`), from its transcripts
    under ``runs`` (``<runs>/<model>/<system>.jsonl``).

    ``models``: run names, one row each (the registry gives Table 9's models, student groups as
    their seeds, repeats as their runs).
    """
    from metrobench.paper.protocol import model_records, protocol_row

    from metrobench.transcripts.system_files import system_transcripts

    missing = [m for m in models if not system_transcripts(runs / m)]
    if not models or missing:
        raise Skip(f"protocol: no transcripts under {runs} for {', '.join(missing) or 'any model'}")
    return pd.DataFrame([protocol_row(m, model_records(runs, m)) for m in models])


def category_matrix(cases: Cases, models: Sequence[Model], partition: str = "holdout") -> pd.DataFrame:
    """Per model x category, pooled case means of composite and Tier 1 (Figure 3's data)."""
    if not models:
        raise Skip("categories: no model benchmarked (no leaderboard, models or stats.category_models)")
    rows = []
    for model in models:
        t1 = per_case(cases, model, partition, "tier1")
        comp = per_case(cases, model, partition, "composite")
        for cat in CATEGORIES:
            ids = [c for c in t1 if c.split("-")[1] == cat]
            if ids:
                rows.append({"model": model.name, "category": cat, "n": len(ids),
                             "composite": round(float(np.mean([comp[c] for c in ids])), 1),
                             "tier1": round(float(np.mean([t1[c] for c in ids])), 1)})
    return pd.DataFrame(rows)


def _accepted(runs: Path, model: str) -> dict[str, bool]:
    """Per recorded case of a model's transcripts, whether the kiosk accepted a submission."""
    from metrobench.errors import MetrobenchError
    from metrobench.paper.protocol import accepted, model_records

    try:
        return {r.case_id: accepted(r) for r in model_records(runs, model)}
    except MetrobenchError as exc:
        raise Skip(f"repeats: {exc}") from None


def _repeat_row(cases: Cases, model: str, runs: list[str], accepted: list[dict[str, bool]], partition: str,
                width: int) -> dict[str, Any]:
    """One model's runs on one partition: Tier 1 of each, their mean, SD and range, pass^k."""
    ids = set.intersection(*(set(cases.case_id[cases.mask(r, partition)].tolist()) for r in runs))
    tier1 = [headline_pair(cases, r, partition)[0] for r in runs]
    row: dict[str, Any] = {"model": model, "partition": partition, "runs": len(runs), "cases": len(ids)}
    row.update({f"tier1_r{i}": round(tier1[i - 1], 2) if i <= len(runs) else None for i in range(1, width + 1)})
    n = max(len(ids), 1)
    shares = [sum(a.get(c, False) for c in ids) / n for a in accepted]
    every = sum(all(a.get(c, False) for a in accepted) for c in ids) / n
    row.update({"tier1_mean": round(float(np.mean(tier1)), 2), "tier1_sd": round(float(np.std(tier1, ddof=1)), 2),
                "tier1_range": round(max(tier1) - min(tier1), 2),
                "accepted_pct": round(100 * float(np.mean(shares)), 1), "pass_k_pct": round(100 * every, 1)})
    return row


def repeats(cases: Cases, models: Sequence[Model], runs: Path) -> pd.DataFrame:
    """Run to run: per model run more than once (``repeats: k``, k > 1), held-out and full.

    Columns: ``runs`` (k), ``cases`` (the partition's cases every run scored), ``tier1_r<i>``
    (run i's headline Tier 1, the mean of the system means; blank past a model's k),
    ``tier1_mean`` (what Table 2 shows), ``tier1_sd`` (sample SD over the runs), ``tier1_range``
    (max - min), ``accepted_pct`` (the runs' mean share of those cases with an accepted
    submission, :func:`metrobench.paper.protocol.accepted`, read from the benchmark view's
    transcripts under ``runs``) and ``pass_k_pct`` (pass^k: the share accepted in all k runs).
    """
    if not models:
        raise Skip("repeats: no model with repeats: k > 1 in the config")
    width = max(len(model.runs) for model in models)
    rows = []
    for model in models:
        names = list(model.runs)
        _need(cases, names, "repeats")
        accepted = [_accepted(runs, r) for r in names]
        rows += [_repeat_row(cases, model.name, names, accepted, partition, width)
                 for partition in ("holdout", WHOLE_IN_REPORTS)]
    return pd.DataFrame(rows)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of the frame's columns (no extra dependency)."""
    return grid(list(frame.columns), frame.itertuples(index=False))


def write_table(frame: pd.DataFrame, path: Path, name: str | None = None, printed: Printed | None = None) -> None:
    """The frame as CSV at ``path`` (every column, machine-readable) and Markdown beside it.

    ``name`` (``table2`` ...): the Markdown is the paper's table as published
    (:mod:`metrobench.paper.markdown`), with ``printed``'s labels and note; otherwise it is the
    CSV's columns.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, lineterminator="\n")
    path.with_suffix(".md").write_text(markdown(name, frame, printed) if name else to_markdown(frame))

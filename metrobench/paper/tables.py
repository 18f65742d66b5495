"""The paper's tables from Parquet scores and the study config, as CSV and Markdown.

Each builder returns a pandas DataFrame, or raises :class:`Skip` naming what is
missing (models without scores, training runs not done), so ``metrobench
tables`` writes every table the present results allow. Headline numbers are
the mean of the six system means (spec §7.5); per-category numbers and the
bootstrap point estimates of Table 9 are pooled case means (spec §10).

The CSV holds every column the project computes; the Markdown beside it
(:func:`write_table` with the table's name) is the table as the paper prints it
(:mod:`metrobench.paper.markdown`).

The study config is a :class:`~metrobench.study.StudyConfig`; read here:
``leaderboard`` (rows of Table 2; ``reference`` rows, the rule baseline, are
shown below the ranks and never ranked), ``students`` (sizes, base model, seeds,
``published``: the paper's released student, Table 4's last column),
``sensitivity`` (Table 3 cells), ``stats`` (resamples, seed,
``bootstrap_models``, ``comparisons``, ``category_models``),
``termination.min_normal_endings``. Student names and the files of a training
run come from :mod:`metrobench.layout`, as the workflow's do.

A model with ``repeats: k`` is its k runs wherever it is named (:meth:`StudyConfig.members`):
its numbers are the mean over them, as a student group's are the mean over its seeds, and
the bootstraps of Tables 9 and 10 resample its runs with its cases
(:mod:`metrobench.stats.bootstrap`); :func:`repeats` is the run-to-run table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metrobench import layout
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
    from metrobench.study import StudyConfig


class Skip(Exception):
    """A table that the present results cannot fill; the message says what is missing."""


def _need(cases: Cases, models: list[str], table: str) -> None:
    missing = [m for m in models if m not in set(cases.models())]
    if missing:
        raise Skip(f"{table}: no scores for {', '.join(missing)}")


def _stats(config: StudyConfig) -> tuple[int, int]:
    return config.stats.n_resamples, config.stats.seed


def _members(config: StudyConfig, model: str) -> list[str]:
    """A configured model name, a student group ``<size>-peft`` -> its seed models, a model with
    ``repeats: k`` -> its k runs."""
    return config.members([model])


def headline_pair(cases: Cases, model: str, partition: str) -> tuple[float, float, float]:
    """(Tier 1, composite low, composite high) headline of one model."""
    low = cases.headline(model, partition, "zero")
    high = cases.headline(model, partition, "max")
    return low.tier1, low.composite, high.composite


def group_headline(cases: Cases, config: StudyConfig, model: str, partition: str) -> tuple[float, float, float, int]:
    members = _members(config, model)
    _need(cases, members, model)
    values = np.array([headline_pair(cases, m, partition) for m in members])
    return (*values.mean(axis=0).tolist(), len(layout.members(config.seeds(), [model])))


def normal_endings(cases: Cases, model: str) -> float:
    m = cases.model == model
    return float(cases.ended[m].mean()) if m.any() else float("nan")


def table2(cases: Cases, config: StudyConfig, results: Path | None = None) -> pd.DataFrame:
    """Leaderboard (held-out): composite, Tier 1.

    Ranked rows first (composite, then Tier 1, descending), then the rows below the
    termination rule (unranked), then the reference lines (``reference: true``, the
    rule baseline: the paper's "Rule-based baseline: 77.1, 84.6" below the ranks).
    With ``results``, a row whose model's runs there disagree on their settings (one
    system run under an edited config, another not) is refused, naming the model, the
    systems and the field (:mod:`metrobench.paper.run_settings`).
    """
    rows = config.leaderboard
    if not rows:
        raise Skip("table2: no leaderboard in the config")
    if results is not None:
        from metrobench.paper.run_settings import check_models

        check_models(results, config.bench.partition, config.members([row.model for row in rows]))
    present = set(cases.models())
    threshold = config.termination.min_normal_endings
    out, missing = [], []
    for row in rows:
        members = _members(config, row.model)
        if not all(m in present for m in members):
            missing.append(row.model)
            continue
        t1, low, high, n_seeds = group_headline(cases, config, row.model, "holdout")
        endings = min(normal_endings(cases, m) for m in members)
        judged = all(cases.unjudged.get(m, 0) == 0 for m in members)
        out.append({"model": row.model if row.label is None else row.label, "licence": row.licence,
                    "vendor": row.vendor, "composite": round(low, 2),
                    "composite_upper": round(high, 2) if not judged else round(low, 2),
                    "judged": judged, "tier1": round(t1, 2), "seeds": n_seeds,
                    "normal_endings_pct": round(100 * endings, 1),
                    "ranked": endings >= threshold and not row.reference, "reference": row.reference})
    if not out:
        raise Skip(f"table2: no scores for {', '.join(missing)}")
    frame = pd.DataFrame(out)
    frame["_block"] = [2 if ref else 0 if ranked else 1 for ranked, ref in zip(frame["ranked"], frame["reference"])]
    frame = frame.sort_values(["_block", "composite", "tier1"], ascending=[True, False, False], kind="stable")
    frame = frame.drop(columns="_block")
    frame.insert(0, "rank", [i + 1 if r else None for i, r in enumerate(frame["ranked"])])
    frame["rank"] = frame["rank"].astype("Int64")
    return frame.reset_index(drop=True)


def table3(cases: Cases, config: StudyConfig) -> pd.DataFrame:
    """Serving-configuration sensitivity: held-out Tier 1 per (decoding, model) cell."""
    cells = config.sensitivity
    if not cells:
        raise Skip("table3: no serving variants (sensitivity) in the config")
    _need(cases, [c.model for c in cells], "table3")
    frame = pd.DataFrame([{"setting": c.row, "column": c.column,
                           "tier1": round(headline_pair(cases, c.model, "holdout")[0], 2)} for c in cells])
    table = frame.pivot(index="setting", columns="column", values="tier1")
    return table.reindex(index=list(dict.fromkeys(c.row for c in cells)),
                         columns=list(dict.fromkeys(c.column for c in cells))).reset_index()


def _gguf_size(results: Path, size: str, seed: int) -> int | None:
    path = Path(layout.gguf_sizes(size, seed, str(results)))
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get(layout.QUANTIZED_GGUF)


def _made_by(results: Path, size: str, seeds: list[int]) -> str | None:
    """Which llama.cpp converted and quantised a size's GGUFs (``gguf_sizes.json``), over its seeds."""
    from metrobench.training.export import LLAMA_CPP_KEY

    found = []
    for seed in seeds:
        path = Path(layout.gguf_sizes(size, seed, str(results)))
        made = json.loads(path.read_text()).get(LLAMA_CPP_KEY) if path.is_file() else None
        if made and made not in found:
            found.append(made)
    return " + ".join(found) or None


def _published(cases: Cases, config: StudyConfig) -> dict[str, float | None] | None:
    """Size -> held-out Tier 1 of the paper's released student (None: not scored); None: none configured."""
    named = {size: spec.published for size, spec in config.students.items() if spec.published}
    if not named:
        return None
    present = set(cases.models())
    return {size: round(headline_pair(cases, named[size], "holdout")[0], 2)
            if named.get(size) in present else None for size in config.students}


def table4(cases: Cases, config: StudyConfig, results: Path) -> pd.DataFrame:
    """PEFT sweep: held-out Tier 1 of base and each seed, mean, delta, seed spread, GGUF size.

    Where the config names the paper's released student of a size (``students.<size>.published``),
    a last column ``published_s42`` holds its held-out Tier 1 (blank while it has no scores).
    """
    students = config.students
    if not students:
        raise Skip("table4: no students in the config")
    needed = [spec.base_model for spec in students.values()] + layout.student_models(config.seeds())
    _need(cases, needed, "table4")
    all_seeds = sorted({s for spec in students.values() for s in spec.seeds})
    published = _published(cases, config)
    rows = []
    for size, spec in students.items():
        base = headline_pair(cases, spec.base_model, "holdout")[0]
        base_full = headline_pair(cases, spec.base_model, WHOLE_IN_REPORTS)[0]
        per_seed = {s: headline_pair(cases, layout.student_name(size, s), "holdout")[0] for s in spec.seeds}
        full = [headline_pair(cases, layout.student_name(size, s), WHOLE_IN_REPORTS)[0] for s in spec.seeds]
        mean = float(np.mean(list(per_seed.values())))
        row: dict[str, Any] = {"size": size, "base_tier1": round(base, 2)}
        for s in all_seeds:
            row[f"s{s}"] = round(per_seed[s], 2) if s in per_seed else None
        sizes = [x for x in (_gguf_size(results, size, s) for s in spec.seeds) if x]
        row.update({"mean": round(mean, 2), "delta": round(mean - base, 2),
                    "seed_spread": round(seed_spread(list(per_seed.values())), 2),
                    "delta_full": round(float(np.mean(full)) - base_full, 2),
                    "q4_k_m_gguf_bytes": int(np.mean(sizes)) if sizes else None})
        if published is not None:
            row[PUBLISHED_COLUMN] = published[size]
        rows.append(row)
    return pd.DataFrame(rows)


def table7(results: Path) -> pd.DataFrame:
    path = Path(layout.teacher_composition(str(results)))
    if not path.is_file():
        raise Skip(f"table7: {path} not built yet")
    return pd.read_csv(path, keep_default_na=False)


#: The paper's adapters per size as Table 8 prints them (MB, decimal; /work/shared/paper-tables.md):
#: fp32 LoRA weights, rank-16 parameters x 4 bytes (305 MB at 27B: ~76 M parameters).
PAPER_ADAPTER_BYTES = {"2b": 42_000_000, "4b": 100_000_000, "9b": 150_000_000, "27b": 305_000_000}


def _adapter_dtypes(metrics: list[dict[str, Any]]) -> str | None:
    """The LoRA weights' dtypes over the seeds ("float32"; "bfloat16+float32" if they differ); None before
    training recorded them."""
    found = sorted({d for m in metrics for d in m.get("adapter_dtypes") or []})
    return "+".join(found) or None


def table8(config: StudyConfig, results: Path) -> pd.DataFrame:
    """Per size: max sequence length, training time per seed, adapter and Q4_K_M sizes.

    Beside the adapter's bytes on disk (the mean over seeds), its LoRA parameter count and
    dtypes as training recorded them, and ``paper_adapter_bytes``, the paper's adapter of
    that size (:data:`PAPER_ADAPTER_BYTES`; empty for a size the paper has not): an fp32
    adapter is about parameters x 4 bytes, a bf16 one half the paper's. ``gguf_llama_cpp`` says
    which llama.cpp converted and quantised the GGUFs (the build that serves them, by default).
    """
    rows, missing = [], []
    for size, spec in config.students.items():
        metrics = []
        for s in spec.seeds:
            path = Path(layout.train_metrics(size, s, str(results)))
            if path.is_file():
                metrics.append(json.loads(path.read_text()))
            else:
                missing.append(f"{size}/seed{s}")
        if not metrics:
            continue
        sizes = [x for x in (_gguf_size(results, size, s) for s in spec.seeds) if x]
        rows.append({"size": size, "max_seq": metrics[0]["recipe"]["max_length"],
                     "minutes_per_seed": round(float(np.mean([m["wall_s"] for m in metrics])) / 60, 1),
                     "adapter_bytes": int(np.mean([m["adapter_bytes"] for m in metrics])),
                     "adapter_params": metrics[0].get("adapter_params"), "adapter_dtypes": _adapter_dtypes(metrics),
                     "paper_adapter_bytes": PAPER_ADAPTER_BYTES.get(size),
                     "q4_k_m_gguf_bytes": int(np.mean(sizes)) if sizes else None,
                     "gguf_llama_cpp": _made_by(results, size, spec.seeds), "seeds": len(metrics)})
    if not rows:
        raise Skip(f"table8: no training metrics ({', '.join(missing) or 'no students'})")
    return pd.DataFrame(rows)


def _runs(cases: Cases, config: StudyConfig, model: str, partition: str, metric: str) -> dict[str, list[float]]:
    """Per case, the model's value in each of its runs (a student group's seeds averaged), over the
    cases every run has: one value per case unless the model has ``repeats``."""
    _need(cases, _members(config, model), model)
    seeds = layout.members(config.seeds(), [model])
    return runs_by_case([seed_mean([cases.by_case(layout.repeat_name(m, i), partition, metric) for m in seeds])
                         for i in range(1, config.repeats.get(model, 1) + 1)])


def _per_case(cases: Cases, config: StudyConfig, model: str, partition: str, metric: str) -> dict[str, float]:
    """Per case, the mean over the model's seeds and runs."""
    return {c: float(np.mean(v)) for c, v in _runs(cases, config, model, partition, metric).items()}


def table9(cases: Cases, config: StudyConfig, partition: str = WHOLE_IN_REPORTS) -> pd.DataFrame:
    """Bootstrap CIs of Tier 1 and composite per configured model, two statistics.

    ``pooled``: the mean over cases, resampling cases (the paper's Table 9);
    ``headline``: the mean of the system means, resampling within systems (the
    statistic of the leaderboard, so its estimate is the headline number).
    """
    models = config.stats_models(config.stats.bootstrap_models)
    if not models:
        raise Skip("table9: no model benchmarked (no leaderboard, models or stats.bootstrap_models)")
    n_resamples, seed = _stats(config)
    rows = []
    for model in models:
        per = {m: (_runs(cases, config, model, partition, m)) for m in ("tier1", "composite")}
        for statistic in ("pooled", "headline"):
            row: dict[str, Any] = {"model": model, "partition": partition, "statistic": statistic}
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


def table10(cases: Cases, config: StudyConfig) -> pd.DataFrame:
    """Paired bootstrap of configured comparisons, held-out and full, with Holm-adjusted p."""
    pairs = config.stats.comparisons
    if not pairs:
        raise Skip("table10: no comparisons in the config")
    n_resamples, seed = _stats(config)
    rows = []
    for partition in ("holdout", WHOLE_IN_REPORTS):
        for a, b in pairs:
            for metric in ("tier1", "composite"):
                interval, p = paired_bootstrap(_runs(cases, config, a, partition, metric),
                                               _runs(cases, config, b, partition, metric),
                                               n_resamples=n_resamples, seed=seed)
                # + 0.0: a difference of equal means over repeats may round to -0.0; a table prints 0.0
                rows.append({"a": a, "b": b, "partition": partition, "metric": metric, "n": interval.n,
                             "delta": round(interval.estimate, 2) + 0.0, "lo": round(interval.lo, 2) + 0.0,
                             "hi": round(interval.hi, 2) + 0.0, "excludes_zero": interval.excludes_zero(),
                             "p": p})
    frame = pd.DataFrame(rows)
    frame["p_holm"] = holm(frame["p"].tolist())
    return frame


def protocol(config: StudyConfig, results: Path) -> pd.DataFrame:
    """How each model uses the kiosk protocol (:mod:`metrobench.paper.protocol`), from its transcripts.

    The models of Table 9 (``stats.bootstrap_models``, else every benchmarked model:
    :meth:`StudyConfig.stats_models`), student groups as their seeds, repeats as their runs.
    """
    from metrobench.paper.protocol import model_records, protocol_row

    runs = Path(layout.runs_root(config.bench.partition, str(results)))
    models = config.members(config.stats_models(config.stats.bootstrap_models))
    missing = [m for m in models if not any((runs / m).glob("*.jsonl"))]
    if not models or missing:
        raise Skip(f"protocol: no transcripts under {runs} for {', '.join(missing) or 'any model'}")
    return pd.DataFrame([protocol_row(m, model_records(runs, m)) for m in models])


def category_matrix(cases: Cases, config: StudyConfig, partition: str = "holdout") -> pd.DataFrame:
    """Per model x category, pooled case means of composite and Tier 1 (Figure 3's data)."""
    models = config.stats_models(config.stats.category_models)
    if not models:
        raise Skip("categories: no model benchmarked (no leaderboard, models or stats.category_models)")
    rows = []
    for model in models:
        t1 = _per_case(cases, config, model, partition, "tier1")
        comp = _per_case(cases, config, model, partition, "composite")
        for cat in CATEGORIES:
            ids = [c for c in t1 if c.split("-")[1] == cat]
            if ids:
                rows.append({"model": model, "category": cat, "n": len(ids),
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


def repeats(cases: Cases, config: StudyConfig, results: Path) -> pd.DataFrame:
    """Run to run: per model with ``repeats: k`` (k > 1), held-out and full.

    Columns: ``runs`` (k), ``cases`` (the partition's cases every run scored), ``tier1_r<i>``
    (run i's headline Tier 1, the mean of the system means; blank past a model's k),
    ``tier1_mean`` (what Table 2 shows), ``tier1_sd`` (sample SD over the runs), ``tier1_range``
    (max - min), ``accepted_pct`` (the runs' mean share of those cases with an accepted
    submission, :func:`metrobench.paper.protocol.accepted`, read from the benchmark's view of
    the transcripts) and ``pass_k_pct`` (pass^k: the share accepted in all k runs).
    """
    if not config.repeats:
        raise Skip("repeats: no model with repeats: k > 1 in the config")
    transcripts = Path(layout.runs_root(config.bench.partition, str(results)))
    width = max(config.repeats.values())
    rows = []
    for model in config.repeats:
        runs = _members(config, model)
        _need(cases, runs, "repeats")
        accepted = [_accepted(transcripts, r) for r in runs]
        rows += [_repeat_row(cases, model, runs, accepted, partition, width)
                 for partition in ("holdout", WHOLE_IN_REPORTS)]
    return pd.DataFrame(rows)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of the frame's columns (no extra dependency)."""
    return grid(list(frame.columns), frame.itertuples(index=False))


def write_table(frame: pd.DataFrame, path: Path, name: str | None = None,
                config: StudyConfig | None = None) -> None:
    """The frame as CSV at ``path`` (every column, machine-readable) and Markdown beside it.

    ``name`` (``table2`` ...): the Markdown is the paper's table as published
    (:mod:`metrobench.paper.markdown`); otherwise it is the CSV's columns.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, lineterminator="\n")
    path.with_suffix(".md").write_text(markdown(name, frame, config) if name else to_markdown(frame))

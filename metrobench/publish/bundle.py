"""One trained student's publishable folder, from the study's own files and nothing typed by hand.

The paper's students are on the hub as ``<owner>/<Base>-metro-v24`` holding
``<Base>-metro-v24-Q4_K_M.gguf`` (the repo's name, then the quantisation: the config's
``downloads.gguf`` entries), the LoRA adapter with its tokenizer, ``training_summary.json`` and
a model card. :func:`gather` reads what the study produced for one (size, seed) and refuses, in
one line, a student whose chain is not complete: no Table 4 row for its seed, or no Q4_K_M GGUF
that passed the export's load check (``quantize`` gives the file its name and writes
``gguf_sizes.json`` only after the check, so both present and agreeing on its bytes is the
proof). Every figure the card shows is a cell of ``table4.csv`` / ``table8.csv`` as written
(their text, not re-rounded), or computed from the scores by the tables' own builders
(:func:`metrobench.paper.tables.table9` for the intervals); a figure the study has not produced
is absent from :class:`Facts`, and so from the card.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from metrobench import layout
from metrobench.errors import MetrobenchError
from metrobench.publish.card import card_text
from metrobench.publish.facts import ADAPTER, CARD, QUANT, SUMMARY, Facts, gguf_name
from metrobench.study import StudyConfig

__all__ = ["ADAPTER", "CARD", "QUANT", "SUMMARY", "Facts", "assemble", "gather", "gguf_name"]

def _row(path: Path, key: str, value: str) -> dict[str, str] | None:
    """The CSV row whose ``key`` column is ``value`` (cells as written), else None."""
    if not path.is_file():
        return None
    with path.open(newline="", encoding="utf-8") as fh:
        return next((row for row in csv.DictReader(fh) if row.get(key) == value), None)


def default_name(base_repo: str, seed: int) -> str:
    """The repo name when none is given: the base's, then ``metro`` and the seed (``Qwen3.5-2B-metro-s42``)."""
    return f"{base_repo.rsplit('/', 1)[-1]}-metro-s{seed}"


def _checked_gguf(size: str, seed: int, root: str) -> tuple[Path, dict[str, Any]]:
    gguf, sizes = Path(layout.quantized_gguf(size, seed, root)), Path(layout.gguf_sizes(size, seed, root))
    recorded = json.loads(sizes.read_text()) if sizes.is_file() else {}
    if not gguf.is_file() or recorded.get(layout.QUANTIZED_GGUF) != gguf.stat().st_size:
        why = "missing" if not gguf.is_file() else f"not recorded by {sizes} (its load check not passed)"
        raise MetrobenchError(f"publish: student {layout.student_name(size, seed)}: no load-checked {QUANT} GGUF "
                              f"({gguf} {why}); build it first: snakemake {gguf}")
    return gguf, recorded


def _published(study: StudyConfig, model: str | None, row: dict[str, str]) -> dict[str, str] | None:
    """The paper's released student of this size: its model, hub repo and file, and Table 4's figure."""
    from metrobench.hub.lock import gguf_key
    from metrobench.paper.markdown import PUBLISHED_COLUMN

    if not model:
        return None
    out = {"model": model}
    entry = study.model_entry(model)
    gguf = ((entry or {}).get("serving") or {}).get("gguf") if isinstance(entry, dict) else None
    download = study.downloads.gguf.get(gguf_key(gguf)) if gguf else None
    if download is not None:
        out.update(repo=download.repo, file=download.file)
    if row.get(PUBLISHED_COLUMN):
        out["tier1"] = row[PUBLISHED_COLUMN]
    return out


def _serving(runs: Path) -> dict[str, Any]:
    """What the student's held-out runs recorded they were served with (the first record; Table 2
    refuses a model whose records disagree, :mod:`metrobench.paper.run_settings`)."""
    from metrobench.agents.serving_record import build_label
    from metrobench.transcripts.records import read_run

    for path in sorted(runs.glob("*.jsonl")):
        for record in read_run(path).records:
            serving, settings = record.meta.get("serving") or {}, record.meta.get("settings") or {}
            out: dict[str, Any] = {}
            if serving.get("build"):
                out["build"] = build_label(serving["build"])
            for key in ("n_ctx", "ctx_per_slot", "parallel", "template_sha256"):
                if serving.get(key) is not None:
                    out[key] = serving[key]
            for key in ("thinking", "temperature", "max_tokens", "max_rounds"):
                if settings.get(key) is not None:
                    out[key] = settings[key]
            return out
    return {}


def _intervals(study: StudyConfig, scores: Path, model: str) -> tuple[dict[str, Any], dict[str, float]] | None:
    """Held-out Tier 1 and composite with Table 9's headline intervals, and Tier 1 per system, from
    the scores as the tables read them; None where the scores do not hold the student."""
    from metrobench.paper.inputs import Model, Resampling
    from metrobench.paper.tables import table9
    from metrobench.scoring.store import read_scores
    from metrobench.stats.cases import load_case_scores

    if not scores.is_dir():
        return None
    cases = load_case_scores(read_scores(scores))
    if model not in cases.models():
        return None
    frame = table9(cases, [Model.single(model)], Resampling(study.stats.n_resamples, study.stats.seed), "holdout")
    row = frame[frame["statistic"] == "headline"].iloc[0].to_dict()
    keep = ("n", "tier1", "tier1_lo", "tier1_hi", "composite", "composite_lo", "composite_hi")
    by_system = {s: round(v, 2) for s, v in cases.headline(model, "holdout").tier1_by_system.items()}
    return {k: row[k] for k in keep}, by_system


def _composition(path: Path) -> list[dict[str, str]] | None:
    if not path.is_file():
        return None
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def gather(study: StudyConfig, size: str, seed: int, *, name: str | None = None, lock: Path | None = None,
           project: Path = Path(".")) -> Facts:
    """Every figure and record of student (``size``, ``seed``) the study produced; refuse an incomplete chain."""
    from metrobench.data.root import pinned_release

    root = study.results
    model = layout.student_name(size, seed)
    if size not in study.students or seed not in study.students[size].seeds:
        raise MetrobenchError(f"publish: student {model}: not in the config's students (size {size}, seeds "
                              f"{study.students[size].seeds if size in study.students else 'none'})")
    student = study.students[size]
    table4 = Path(layout.table_path("table4", root))
    row = _row(table4, "size", size)
    if row is None or not row.get(f"s{seed}"):
        raise MetrobenchError(f"publish: student {model}: no Table 4 row ({table4}: "
                              f"{'missing' if not table4.is_file() else f'no s{seed} figure for size {size}'}); "
                              f"build it first: snakemake {table4}")
    _, sizes = _checked_gguf(size, seed, root)
    adapter = Path(layout.adapter_dir(size, seed, root))
    metrics_path = Path(layout.train_metrics(size, seed, root))
    if not metrics_path.is_file():
        raise MetrobenchError(f"publish: student {model}: no adapter with its training record ({metrics_path})")
    metrics = json.loads(metrics_path.read_text())
    base_repo = metrics.get("base") or metrics.get("recipe", {}).get("base")
    if not base_repo:
        raise MetrobenchError(f"publish: {metrics_path}: field base: missing (the base the student was trained on)")
    facts = Facts(size=size, seed=seed, model=model, name=name or default_name(base_repo, seed),
                  base_model=student.base_model, base_repo=base_repo, table4=row, seed_tier1=row[f"s{seed}"],
                  delta=round(float(row[f"s{seed}"]) - float(row["base_tier1"]), 2))
    facts.table8 = _row(Path(layout.table_path("table8", root)), "size", size)
    found = _intervals(study, Path(layout.scores_root("holdout", layout.TIER1, root)), model)
    if found:
        facts.intervals, facts.by_system = found
    facts.published = _published(study, student.published, row)
    facts.serving = _serving(Path(layout.runs_root("holdout", root)) / model)
    licences = {r.model: r.licence for r in study.leaderboard if r.licence}
    facts.licence = licences.get(student.base_model) or licences.get(layout.student_group(size))
    release = pinned_release()
    facts.data = {"repository": release.repository, "commit": study.data.commit}
    facts.summary = _summary(study, facts, metrics, sizes, lock or project / study.downloads.lock, adapter)
    return facts


def _summary(study: StudyConfig, facts: Facts, metrics: dict[str, Any], sizes: dict[str, Any], lock: Path,
             adapter: Path) -> dict[str, Any]:
    """``training_summary.json``: the recipe, seed, base at its locked commit, training set, versions, converter."""
    from metrobench.hub.lock import read_lock
    from metrobench.training.export import LLAMA_CPP_KEY

    base: dict[str, Any] = {"repo": facts.base_repo, "model": facts.base_model}
    if lock.is_file():
        entry = read_lock(lock).bases.get(facts.base_repo)
        if entry is not None:
            base.update(revision=entry.revision, commit=entry.commit)
    root = study.results
    dataset = Path(layout.teacher_dataset(root))
    training_set: dict[str, Any] = {}
    if dataset.is_file():
        training_set["sha256"] = hashlib.sha256(dataset.read_bytes()).hexdigest()
    composition = _composition(Path(layout.teacher_composition(root)))
    if composition is not None:
        training_set["composition"] = composition
    trained = {k: metrics[k] for k in ("examples", "train_examples", "val_examples", "steps", "epochs",
                                       "final_train_loss", "val_loss", "best_val_loss", "wall_s", "device",
                                       "adapter_params", "adapter_dtypes") if metrics.get(k) is not None}
    out: dict[str, Any] = {"student": facts.model, "size": facts.size, "seed": facts.seed,
                           "recipe_file": study.students[facts.size].recipe, "recipe": metrics.get("recipe"),
                           "base": base, "training_set": training_set, "training": trained,
                           "trainer_versions": metrics.get("versions"),
                           "chat_template_sha256": metrics.get("chat_template_sha256"),
                           "gguf": {"file": gguf_name(facts.name), "quantisation": QUANT,
                                    "bytes": sizes.get(layout.QUANTIZED_GGUF)},
                           "converter": sizes.get(LLAMA_CPP_KEY)}
    return {k: v for k, v in out.items() if v not in (None, {})}


def _place(src: Path, dst: Path) -> None:
    """A hard link where the filesystem allows (a 27B GGUF is 16 GB), else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _clear(out: Path, ours: set[str]) -> None:
    """Remove a previous folder's files, which are these names only; anything else in ``out`` is the
    user's, and the folder is refused naming it (nothing is deleted that publish did not write)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise MetrobenchError(f"{out}: not a folder; give publish another --out")
    # a GGUF named for another repo name is a previous publish's too (``<name>-Q4_K_M.gguf``)
    ours = ours | {p.name for p in out.iterdir() if p.is_file() and p.name.endswith(gguf_name(""))}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours)
    if foreign:
        raise MetrobenchError(f"{out}: holds {foreign[0]}, which publish did not write; move it away or "
                              "give publish another --out (nothing was deleted)")
    for name in ours:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def assemble(facts: Facts, study: StudyConfig, out: Path) -> dict[str, int]:
    """Write the folder (replacing a previous one) and return its files' bytes by relative path."""
    root = study.results
    _clear(out, {gguf_name(facts.name), ADAPTER, SUMMARY, CARD})
    out.mkdir(parents=True, exist_ok=True)
    _place(Path(layout.quantized_gguf(facts.size, facts.seed, root)), out / gguf_name(facts.name))
    adapter = Path(layout.adapter_dir(facts.size, facts.seed, root))
    for src in sorted(p for p in adapter.rglob("*") if p.is_file()):
        _place(src, out / ADAPTER / src.relative_to(adapter))
    (out / SUMMARY).write_text(json.dumps(facts.summary, indent=2) + "\n", encoding="utf-8")
    (out / CARD).write_text(card_text(facts), encoding="utf-8")
    return {p.relative_to(out).as_posix(): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}

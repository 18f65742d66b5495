"""Every table and figure of the paper, declared once: what it reads, and what builds or draws it.

Two readers, one declaration (in the manner of :mod:`metrobench.scoring.registry`):

* the workflow (``workflow/rules/common.smk``) asks :func:`inputs` for a table's files, so
  Snakemake reruns it exactly when something it reads changes;
* ``metrobench tables`` (:func:`metrobench.paper.report.build_tables`) loops over
  :data:`TABLES` and :data:`FIGURES` and builds what ``--only`` names.

A table's models are resolved from the study config here (configured names, student groups
expanded to their seeds and repeated models to their runs: ``StudyConfig.members``), so "every
benchmarked model" and "Table 9's models" mean the same files on both sides. This module is
the only one of the paper layer that reads the study config or :mod:`metrobench.layout` for a
table: :class:`TableInputs` resolves what a declaration hands its builder into the plain values
of :mod:`metrobench.paper.inputs` (models with their runs, the leaderboard's rows, student
sizes with their seeds' files, the runs folder, prices, the bootstrap's settings, what the
Markdown prints with), so a builder's signature is what it reads. Adding a table is one
:class:`Table` entry and one builder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from metrobench import layout
from metrobench.paper import deployment, figures, serving_tables
from metrobench.paper import tables as T
from metrobench.paper.inputs import Cell, Footprint, Model, Printed, Resampling, Row, Seed, StudentGroup
from metrobench.vocabulary import WHOLE_IN_REPORTS

if TYPE_CHECKING:
    from metrobench.stats.cases import Cases
    from metrobench.study import Price, StudyConfig

#: The view the held-out tables read (its scores Tier 1 only: no judge key needed).
HOLDOUT_VIEW = "holdout"


@dataclass
class TableInputs:
    """What the builders are given, resolved here from the study config and the layout of the
    results folder (the one place that reads either for a table); each input is resolved when a
    table asks for it, so a table reads only what it names.

    ``results``: the results folder the runs, students' files and the teacher's composition are
    read under; ``scores``: the table's scores folder (read once, only by a table that reads
    scores; its judge cache beside it)."""

    config: StudyConfig
    results: Path
    scores: Path
    #: the scores, once read (or given: a test's synthetic cases)
    loaded: Cases | None = None

    def cases(self) -> Cases:
        if self.loaded is None:
            from metrobench.scoring.store import read_scores
            from metrobench.stats.cases import load_case_scores

            self.loaded = load_case_scores(read_scores(self.scores))
        return self.loaded

    def model(self, name: str) -> Model:
        """A configured name with its runs: a student group's seeds, a model's ``repeats``
        (:meth:`StudyConfig.members`, per repeat)."""
        seeds = layout.members(self.config.seeds(), [name])
        k = self.config.repeats.get(name, 1)
        return Model(name, tuple(seeds),
                     tuple(tuple(layout.repeat_name(s, i) for s in seeds) for i in range(1, k + 1)))

    def models(self, names: list[str]) -> list[Model]:
        return [self.model(name) for name in names]

    def stats_models(self, listed: list[str]) -> list[Model]:
        """A statistics table's models: those listed, else every benchmarked model."""
        return self.models(self.config.stats_models(listed))

    def leaderboard(self) -> list[Row]:
        return [Row(self.model(r.model), r.label, r.licence, r.vendor, r.family, r.reference)
                for r in self.config.leaderboard]

    def cells(self) -> list[Cell]:
        return [Cell(c.row, c.column, c.model) for c in self.config.sensitivity]

    def comparisons(self) -> list[tuple[Model, Model]]:
        return [(self.model(a), self.model(b)) for a, b in self.config.stats.comparisons]

    def repeated(self) -> list[Model]:
        """The models run more than once (``repeats: k``, k > 1)."""
        return self.models(list(self.config.repeats))

    def students(self) -> list[StudentGroup]:
        """Each student size with its seeds' model names and files (under :attr:`results`)."""
        root = str(self.results)
        return [StudentGroup(size, spec.base_model,
                        tuple(Seed(s, layout.student_name(size, s), Path(layout.gguf_sizes(size, s, root)),
                                   Path(layout.train_metrics(size, s, root))) for s in spec.seeds),
                        spec.published)
                for size, spec in self.config.students.items()]

    def resampling(self) -> Resampling:
        return Resampling(self.config.stats.n_resamples, self.config.stats.seed)

    def runs(self) -> Path:
        """The benchmark view's transcripts: ``<runs>/<model>/<system>.jsonl``."""
        return Path(layout.runs_root(self.config.bench.partition, str(self.results)))

    def composition(self) -> Path:
        return Path(layout.teacher_composition(str(self.results)))

    def printed(self, name: str) -> Printed:
        """What table ``name``'s Markdown prints with: the leaderboard's labels, Table 2's rule, its note,
        and for Table 2 the published rows beside its own and what its judge is."""
        from metrobench.paper.published import judge_note

        scoring = self.config.scoring
        return Printed({row.model: row.label for row in self.config.leaderboard if row.label},
                       self.config.termination.min_normal_endings, self.config.report.notes.get(name),
                       published=name == "table2",
                       judge=judge_note(scoring.judge, scoring.judge_model) if name == "table2" else None)

    def judge_cache(self) -> Path:
        return deployment.judge_cache_path(self.scores)

    def prices(self) -> dict[str, Price]:
        return dict(self.config.prices)

    def footprints(self) -> dict[str, Footprint]:
        """Per model of the leaderboard's non-reference rows (a group: its seeds), the GGUF it is
        served from and, for a student, its ``gguf_sizes.json`` (the deployment table's local rows)."""
        models = layout.members(self.config.seeds(), [r.model for r in self.config.leaderboard if not r.reference])
        return {model: self._footprint(model) for model in models}

    def _footprint(self, model: str) -> Footprint:
        student = layout.student_of(self.config.seeds(), model)
        if student is not None:
            root = str(self.results)
            return Footprint(Path(layout.quantized_gguf(*student, root=root)),
                             Path(layout.gguf_sizes(*student, root)))
        return Footprint(_served_file(self.config, model))


def _served_file(study: StudyConfig, model: str) -> Path | None:
    """The GGUF a configured model is served from, as its model config names it (None: unknown)."""
    from metrobench.agents.serving import model_file
    from metrobench.errors import MetrobenchError

    try:
        cfg = study.config_of(study.configured(model))
        return model_file(cfg) if cfg.serving else None
    except (MetrobenchError, OSError, ValueError):
        return None


def _none(study: StudyConfig) -> list[str]:
    return []


@dataclass(frozen=True)
class Table:
    """One table: the models whose scores and runs it reads, other files, and its builder.

    ``scores``/``runs`` give run names (seeds and repeats expanded); scores are read from the
    benchmark's view scored Tier 1 + 2, or with ``tier1`` from the held-out view scored Tier 1
    only; runs always from the benchmark's view. ``files`` gives other inputs under the results
    folder (a :func:`metrobench.layout.under` namespace)."""

    name: str
    build: Callable[[TableInputs], pd.DataFrame]
    scores: Callable[[StudyConfig], list[str]] = _none
    runs: Callable[[StudyConfig], list[str]] = _none
    files: Callable[[StudyConfig, object], list[str]] = lambda study, paths: []
    tier1: bool = False


@dataclass(frozen=True)
class Figure:
    """One figure, drawn from one table's frame (the table is built for it, not written)."""

    name: str
    table: str
    draw: Callable[[dict[str, pd.DataFrame], TableInputs, Path], None]
    #: why the frame cannot be drawn, or None (e.g. the baseline has no scores)
    check: Callable[[dict[str, pd.DataFrame], TableInputs], str | None] = lambda frames, sources: None


# --- the models each table reads -------------------------------------------------------------

def _students(study: StudyConfig) -> list[str]:
    return layout.student_models(study.seeds())


def _leaderboard(study: StudyConfig) -> list[str]:
    return study.members([row.model for row in study.leaderboard])


def _table4(study: StudyConfig) -> list[str]:
    bases = [spec.base_model for spec in study.students.values()]
    published = [spec.published for spec in study.students.values() if spec.published]
    return bases + _students(study) + published


def _student_files(*kinds: str) -> Callable[[StudyConfig, object], list[str]]:
    def files(study: StudyConfig, paths) -> list[str]:
        seeds = study.seeds()
        return [getattr(paths, kind)(*layout.student_of(seeds, m)) for kind in kinds for m in _students(study)]
    return files


def _bootstrapped(sources: TableInputs) -> list[Model]:
    """Table 9's models (and the protocol table's): ``stats.bootstrap_models``, else every benchmarked one."""
    return sources.stats_models(sources.config.stats.bootstrap_models)


def _bootstrap(study: StudyConfig) -> list[str]:
    return study.members(study.stats_models(study.stats.bootstrap_models))


def _served(study: StudyConfig) -> list[str]:
    """Tables 5 and 6: one run a leaderboard row (its first seed or run), and Table 3's models."""
    rows = [study.members([r.model])[0] for r in study.leaderboard if not r.reference]
    return list(dict.fromkeys(rows + [cell.model for cell in study.sensitivity]))


def _deployment(study: StudyConfig) -> list[str]:
    """Every run of each non-reference leaderboard row (seeds pooled)."""
    return study.members([r.model for r in study.leaderboard if not r.reference])


# --- the declarations --------------------------------------------------------------------------

TABLES: dict[str, Table] = {t.name: t for t in [
    Table("table2", lambda s: T.table2(s.cases(), s.leaderboard(), s.config.termination.min_normal_endings,
                                       s.runs()), scores=_leaderboard),
    Table("table3", lambda s: T.table3(s.cases(), s.cells()),
          scores=lambda study: [cell.model for cell in study.sensitivity]),
    Table("table4", lambda s: T.table4(s.cases(), s.students()), scores=_table4,
          files=_student_files("gguf_sizes"), tier1=True),
    Table("table7", lambda s: T.table7(s.composition()), files=lambda study, paths: [paths.teacher_composition()]),
    Table("table8", lambda s: T.table8(s.students()), files=_student_files("adapter_dir", "gguf_sizes")),
    Table("table9", lambda s: pd.concat([T.table9(s.cases(), _bootstrapped(s), s.resampling(), WHOLE_IN_REPORTS),
                                         T.table9(s.cases(), _bootstrapped(s), s.resampling(), "holdout")]),
          scores=_bootstrap),
    Table("table10", lambda s: T.table10(s.cases(), s.comparisons(), s.resampling()),
          scores=lambda study: study.members([m for pair in study.stats.comparisons for m in pair])),
    Table("protocol", lambda s: T.protocol(s.runs(), [r for m in _bootstrapped(s) for r in m.runs]),
          scores=_bootstrap, runs=_bootstrap),
    # Tables 5 and 6 are read from the runs' recorded settings and serving, not the config.
    Table("table5", lambda s: serving_tables.table5(s.leaderboard(), s.cells(), s.runs()), runs=_served),
    Table("table6", lambda s: serving_tables.table6(s.leaderboard(), s.cells(), s.runs()), runs=_served),
    Table("categories", lambda s: T.category_matrix(s.cases(), s.stats_models(s.config.stats.category_models),
                                                    "holdout"),
          scores=lambda study: study.members(study.stats_models(study.stats.category_models))),
    # Run to run: each repeat's Tier 1 (scores) and accepted submissions (transcripts).
    Table("repeats", lambda s: T.repeats(s.cases(), s.repeated(), s.runs()),
          scores=lambda study: study.members(list(study.repeats)),
          runs=lambda study: study.members(list(study.repeats))),
    # What each row costs, from its runs (the judge's rows from the judge cache, when there).
    Table("deployment", lambda s: deployment.deployment(s.leaderboard(), s.runs(), s.footprints(), s.prices(),
                                                        s.judge_cache()), runs=_deployment),
    Table("quality_cost", lambda s: deployment.quality_cost(s.cases(), s.leaderboard(), s.runs(), s.footprints(),
                                                            s.prices(), s.resampling()),
          scores=_deployment, runs=_deployment, tier1=True),
]}


def _baseline_missing(frames: dict[str, pd.DataFrame], sources: TableInputs) -> str | None:
    baseline = sources.config.stats.baseline
    return None if baseline in set(frames["categories"]["model"]) else "no scores for the baseline"


FIGURES: dict[str, Figure] = {f.name: f for f in [
    Figure("figure2", "table2", lambda frames, s, path: figures.figure2(frames["table2"], path)),
    Figure("figure3", "categories", lambda frames, s, path: figures.figure3(frames["categories"], path)),
    Figure("figure4", "categories",
           lambda frames, s, path: figures.figure4(frames["categories"], s.config.stats.baseline, path),
           check=_baseline_missing),
    Figure("figure5", "table4", lambda frames, s, path: figures.figure5(frames["table4"], path)),
    Figure("figure-deployment", "quality_cost",
           lambda frames, s, path: figures.figure_deployment(frames["quality_cost"], path)),
]}


def table_of(name: str) -> Table:
    """The table a table or figure name reads (a figure: its source table)."""
    return TABLES[FIGURES[name].table] if name in FIGURES else TABLES[name]


def table_scores_root(study: StudyConfig, name: str, root: str) -> str:
    """The scores folder a table (or a figure's table) reads."""
    if table_of(name).tier1:
        return layout.scores_root(HOLDOUT_VIEW, layout.TIER1, root=root)
    return layout.scores_root(study.bench.partition, root=root)


def inputs(study: StudyConfig, name: str) -> list[str]:
    """Every file a table (or a figure's table) reads, under the config's results folder:
    its models' scores and runs, one per system, and its other files."""
    table = table_of(name)
    paths = layout.under(study.results)
    partition, tiers = (HOLDOUT_VIEW, layout.TIER1) if table.tier1 else (study.bench.partition, layout.TIER2)
    systems = list(study.systems)
    scores = [paths.scores_path(m, s, partition, tiers) for m in table.scores(study) for s in systems]
    runs = [paths.run_path(m, s, study.bench.partition) for m in table.runs(study) for s in systems]
    return scores + runs + table.files(study, paths)

"""The run job: one model on one system for one view, declared once.

Contract: :func:`run_job` builds a :class:`RunJob` from the study config and the job's three
names (its model as the tables name it, its system, its view), and nothing else: the workflow's
``run`` rule asks it for its inputs, its settings fingerprint (the param that reruns a job whose
settings changed) and its GPU need; ``metrobench run --view`` builds the same value from the same
three names and executes it; ``metrobench plan`` asks it for the cases, the fingerprint and the
transcripts, and parses no command line. What a run is made with therefore cannot differ between
the rule that plans it, the command that runs it and the plan that prices it.

What the three names decide (DESIGN.md §3, the views of a work transcript):

- the model's settings, through the one door
  (:meth:`~metrobench.study.StudyConfig.config_of`): a repeat ``<model>-rep<i>`` is run ``i`` of
  its model; a student ``<size>-peft-s<seed>`` is ``student_serving`` serving its Q4_K_M GGUF, with
  the thinking its recipe's chat template is served with (a paper-recipe student, Qwen3.5's
  template, thinks; a corrected one does not);
- the view: the config's ``bench.partition`` and ``holdout`` are narrowed by ``bench.sample``; the
  teachers' ``train`` view and the errata table's whole view are not (traces need every train case);
- in the ``train`` view the model runs as it teaches (:meth:`ModelConfig.as_teacher`): the scripted
  rule agent's teacher mode, into a work transcript of its own
  (:func:`metrobench.layout.teacher_work_path`), so its two modes never set each other aside; any
  other model is itself and shares its benchmark row's work transcript.

The resume rule both the runner and the plan read is :func:`metrobench.agents.runner.run.resume_state`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from metrobench import layout
from metrobench.data.root import locate_root
from metrobench.data.selection import Selection
from metrobench.errors import MetrobenchError
from metrobench.vocabulary import WHOLE

if TYPE_CHECKING:
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.data import Benchmark
    from metrobench.data.models import Case
    from metrobench.study import Gpu, StudyConfig

#: The views besides the config's ``bench.partition``: Table 4's and the teachers'.
HOLDOUT_VIEW = "holdout"
TEACHER_VIEW = "train"
#: The errata table's view: every case.
ERRATA_VIEW = WHOLE


@dataclass(frozen=True)
class RunJob:
    """One model on one system for one view, with everything its run is made with."""

    model: str                  # the run's name in paths and tables (a repeat's, a student's)
    system: str
    view: str                   # the partition whose cases the view holds
    config: ModelConfig         # the settings it runs with (the teacher mode in the train view)
    data: str | None            # the benchmark root (None: found as every command finds it)
    split: str | None           # the split file the view's partition is read from (None: the committed split)
    sample: int | None          # bench.sample, in the views it narrows
    work: str | None            # the model's work transcript of the system: run and resumed there
    out: str                    # the view, cut from the work transcript (without one: the transcript itself)
    gguf: str | None            # a student's GGUF (made by the export rule)
    model_file: str | None      # the model config file its settings come from (an input)
    card: Gpu | None            # the study's card: a GPU row is refused on a CPU build or when it does not fit
    case_ids: tuple[str, ...] | None = None  # a run given by flags: these case ids only
    limit: int | None = None                # a run given by flags: the first N cases only

    def fingerprint(self) -> str:
        """The settings fingerprint its transcript records (:meth:`ModelConfig.fingerprint`)."""
        return self.config.fingerprint()

    def selection(self, split_digest: str = "") -> Selection:
        """The cases of its system it covers (recorded in every record with the split's digest)."""
        return Selection(self.system, self.view, split=split_digest, sample=self.sample, cases=self.case_ids,
                         limit=self.limit)

    def cases(self, bench: Benchmark, partitions: dict[str, str]) -> list[Case]:
        """Its cases, in case-file order, of the split's ``partitions``."""
        return self.selection().resolve(bench, partitions)

    def resolve(self, bench: Benchmark) -> tuple[Selection, list[Case]]:
        """Its selection as its records state it (with its split file's digest) and its cases, read from
        its split file (``None``: the committed split)."""
        from metrobench.data.partition import load_split
        from metrobench.data.selection import split_digest

        partitions = load_split(bench, self.split)
        selection = self.selection(split_digest(partitions))
        return selection, selection.resolve(bench, partitions)

    @property
    def served_gguf(self) -> str | None:
        """The GGUF file a configured model serves from (None: a package, hosted, scripted, a student)."""
        serving = self.config.serving
        return None if self.gguf or serving is None else serving.gguf

    @property
    def served_here(self) -> bool:
        """Whether its run starts llama-server (a serving block, no endpoint of its own already up)."""
        return self.config.serving is not None and not self.config.base_url

    @property
    def gpu(self) -> int:
        """GPU jobs it takes (a Snakemake resource): 1 when served here by llama.cpp, 0 otherwise."""
        return 1 if self.served_here else 0

    def inputs(self) -> dict[str, str]:
        """What the run reads, by name: the split, its model config file, the GGUF it serves."""
        inputs = {"split": self.split} if self.split else {}
        if self.gguf:
            inputs["gguf"] = self.gguf
            return inputs
        if self.model_file:
            inputs["model"] = self.model_file
        if self.served_gguf:
            inputs["served_gguf"] = self.served_gguf
        return inputs


def data_root(study: StudyConfig) -> tuple[str, str]:
    """The benchmark root every job of the study reads, and what said so: ``data.path``, else
    ``$METROBENCH_DATA``, else ``../shared/metrollm-bench``, else ``.data/metrollm-bench``
    (:func:`~metrobench.data.root.locate_root`); when none is there, the pinned clone under the
    results folder (the workflow's ``fetch_data`` rule)."""
    found, source = locate_root(study.data.path or None, source="data.path")
    if found:
        return str(found), source
    return layout.under(study.results).data_clone(), "the pinned clone, fetched at data.commit"


def run_config(study: StudyConfig, model: str) -> ModelConfig:
    """The settings a run named ``model`` is made with (see the module docstring; :func:`run_job` applies the
    train view's teacher mode). A name the config does not run (a misspelt model, a repeat beyond its
    count) is an error."""
    from metrobench.agents.chat_template import chat_template
    from metrobench.training.recipe import load_recipe

    unknown = study.unknown_model(model)
    if unknown:
        raise MetrobenchError(unknown)
    student = layout.student_of(study.seeds(), model)
    if student:
        recipe = load_recipe(study.students[student[0]].recipe)
        cfg = study.config_of(model, gguf=layout.under(study.results).quantized_gguf(*map(str, student)),
                                 thinking=chat_template(recipe.template).thinking)
    else:
        configured, repeat = study.repeat_of(model) or (model, 1)
        cfg = study.config_of(configured, repeat=repeat)
    return cfg


def run_job(study: StudyConfig, model: str, system: str, view: str) -> RunJob:
    """The run job of ``model`` on ``system`` for ``view``, as the study config declares it."""
    paths = layout.under(study.results)
    teaching = view == TEACHER_VIEW
    cfg = run_config(study, model)
    work = paths.work_path(model, system)
    if teaching:
        teacher = cfg.as_teacher()
        if teacher is not cfg:
            work = layout.teacher_work_path(work)
        cfg = teacher
    student = layout.student_of(study.seeds(), model) is not None
    entry = None if student else study.model_entry(study.configured(model))
    narrowed = view in (study.bench.partition, HOLDOUT_VIEW)
    return RunJob(
        model=model, system=system, view=view, config=cfg, data=data_root(study)[0], split=paths.split_path(),
        sample=study.bench.sample if narrowed and study.bench.sample else None, work=work,
        out=paths.run_path(model, system, view),
        gguf=cfg.serving.gguf if student and cfg.serving else None,   # run_config serves its Q4_K_M GGUF
        model_file=entry if isinstance(entry, str) else None, card=study.gpu)


def check_view_names(study: StudyConfig, system: str, view: str) -> None:
    """Refuse a system or view the study has no run job for, in one line naming it."""
    if system not in study.systems:
        raise MetrobenchError(f"system {system!r} is not among the config's systems ({', '.join(study.systems)})")
    views = dict.fromkeys([study.bench.partition, HOLDOUT_VIEW, TEACHER_VIEW, ERRATA_VIEW])
    if view not in views:
        raise MetrobenchError(f"view {view!r} is no view of a run job ({', '.join(views)})")

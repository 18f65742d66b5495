"""Where every result lives and what every derived model is called, in one place.

Contract: pure functions of names (no I/O, no imports beyond the standard
library), so that the workflow (``workflow/rules/common.smk`` imports them as
it parses) and the commands (the paper tables, the student script) agree on
every path by construction. Change a path here and both follow; a rule's
output and the command that reads it can no longer drift apart.

Naming rules:

* a student of size ``S`` (a key of the config's ``students``) trained at seed
  ``N`` is the model ``S-peft-sN``; the seeds together are the *group*
  ``S-peft``, which the leaderboard and the statistics may name instead of one
  seed (its numbers are the mean over its members);
* one seed's training lives in ``<results>/peft/S/seedN/``: the adapter, the
  merged model, the f16 and Q4_K_M GGUFs and ``gguf_sizes.json`` (bytes of
  each GGUF by file name).
* a configured model with ``repeats: k`` runs k times: repeat 1 is the model itself,
  repeat ``i`` of 2..k the model ``M-rep<i>``, each with its own work transcript; the
  repeats together are the model (its numbers are the mean over them, as a group's).

Paths are strings with ``/`` (what Snakemake's patterns are); a wildcard is
passed as its pattern, e.g. ``run_path("{model}", "{system}", "{partition}")``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from types import SimpleNamespace

RESULTS = "results"
GROUP_SUFFIX = "-peft"
ADAPTER = "adapter"
MERGED = "merged"
F16_GGUF = "model-f16.gguf"
QUANTIZED_GGUF = "model-Q4_K_M.gguf"
GGUF_SIZES = "gguf_sizes.json"
TRAIN_METRICS = "train_metrics.json"
#: Seeds of each student size, as the study config's ``students`` gives them.
Students = Mapping[str, Sequence[int]]


def student_group(size: str) -> str:
    """The name of a student's seed group: ``<size>-peft``."""
    return f"{size}{GROUP_SUFFIX}"


def student_name(size: str, seed: int | str) -> str:
    """The model name of one trained student: ``<size>-peft-s<seed>``."""
    return f"{student_group(size)}-s{seed}"


def student_models(students: Students) -> list[str]:
    """Every student model of the study, by size in config order, then seed."""
    return [student_name(size, seed) for size, seeds in students.items() for seed in seeds]


def student_of(students: Students, model: str) -> tuple[str, int] | None:
    """(size, seed) of a configured student model name, else None."""
    for size, seeds in students.items():
        for seed in seeds:
            if model == student_name(size, seed):
                return size, seed
    return None


def members(students: Students, models: Iterable[str]) -> list[str]:
    """Model names with each student group ``<size>-peft`` expanded to its seeds' models."""
    out: list[str] = []
    for model in models:
        size = model[: -len(GROUP_SUFFIX)] if model.endswith(GROUP_SUFFIX) else None
        if size is not None and size in students:
            out += [student_name(size, seed) for seed in students[size]]
        else:
            out.append(model)
    return out


def peft_dir(size: str, seed: int | str, root: str = RESULTS) -> str:
    """One seed's training folder."""
    return f"{root}/peft/{size}/seed{seed}"


def _in_seed_dir(name: str, doc: str) -> Callable[..., str]:
    """A path function for one file or folder in a seed's training folder."""
    def path(size: str, seed: int | str, root: str = RESULTS) -> str:
        return f"{peft_dir(size, seed, root)}/{name}"

    path.__doc__ = doc
    return path


adapter_dir = _in_seed_dir(ADAPTER, "The LoRA adapter training writes (and resumes from its checkpoints).")
merged_dir = _in_seed_dir(MERGED, "The adapter merged into the 16-bit base weights.")
f16_gguf = _in_seed_dir(F16_GGUF, "The merged model converted to GGUF f16.")
quantized_gguf = _in_seed_dir(QUANTIZED_GGUF, "The Q4_K_M GGUF a student is served from.")
gguf_sizes = _in_seed_dir(GGUF_SIZES,
                          "The JSON of GGUF sizes in bytes, by file name (Tables 4 and 8 read the Q4_K_M one).")
train_metrics = _in_seed_dir(f"{ADAPTER}/{TRAIN_METRICS}",
                             "What training wrote beside the adapter: wall time, adapter bytes, the recipe (Table 8).")


def _in_results(name: str, doc: str) -> Callable[..., str]:
    """A path function for one fixed file or folder of the results folder."""
    def path(root: str = RESULTS) -> str:
        return f"{root}/{name}"

    path.__doc__ = doc
    return path


data_clone = _in_results("data/metrollm-bench",
                         "The benchmark cloned at its pinned commit, when the config names no local copy.")
data_verified = _in_results("data/verified.json", "The stamp of the benchmark's checked digests.")
split_path = _in_results("partition.json", "The train/held-out split every run and score reads.")
viewer_dir = _in_results("view", "The case viewer's static site.")
teacher_composition = _in_results("teacher/composition.csv",
                                  "The training set's composition (Table 7), written beside the dataset.")
teacher_dataset = _in_results("teacher/dataset.jsonl",
                              "The distillation training set (one JSON line per kept trace).")


def base_stamp(base: str, root: str = RESULTS) -> str:
    """The stamp of a student base downloaded at its locked commit (a hub id may hold ``/``)."""
    return f"{root}/models/{base}.json"


def train_work(size: str, seed: int | str, root: str = RESULTS) -> str:
    """Training's checkpoints of one seed, kept across killed jobs so a rerun resumes."""
    return f"{root}/work/peft/{size}/seed{seed}"


def benchmark_path(job: str, root: str = RESULTS) -> str:
    """A job's Snakemake ``benchmark:`` record (wall time, memory), read by ``metrobench plan``."""
    return f"{root}/benchmarks/{job}.tsv"



def work_path(model: str, system: str, root: str = RESULTS) -> str:
    """A model's one growing transcript of a system: every case it ran, whichever view asked.

    Runs append here and resume from here (per case); the views below are cut from it, so
    a case two targets read (a teacher's train case, also in its benchmark row) runs once.
    """
    return f"{root}/work/{model}/{system}.jsonl"


def runs_root(partition: str, root: str = RESULTS) -> str:
    """The folder of one view's transcripts: ``<runs>/<model>/<system>.jsonl``.

    A view holds a partition's cases (``all``, ``holdout`` or ``train``) of each run:
    the benchmark's tables read the config's ``bench.partition``, Table 4 ``holdout``,
    the teachers' traces ``train``.
    """
    return f"{root}/runs/{partition}"


def teacher_work_path(work: str) -> str:
    """The work transcript of a model's teacher runs where it teaches as another model than it benchmarks
    (a scripted agent's teacher mode: ``ModelConfig.as_teacher``): ``<system>.teacher.jsonl`` beside
    ``work``, so the two modes' records never meet in one transcript."""
    stem = work.removesuffix(".jsonl")
    return f"{stem}.teacher.jsonl"


def run_file(runs_dir: str, model: str, system: str) -> str:
    """A model's transcript of a system inside a runs folder (what ``--runs DIR`` options take)."""
    return f"{runs_dir}/{model}/{system}.jsonl"


def run_path(model: str, system: str, partition: str, root: str = RESULTS) -> str:
    """One view of a run: the transcript of a model on a system's cases of one partition."""
    return run_file(runs_root(partition, root), model, system)


#: What a scores folder holds: Tier 1 only (``--judge none``: Table 4 and the teacher
#: filter, no judge key needed), or Tiers 1 and 2 with the config's judge (every other table).
TIER1, TIER2 = "tier1", "tier2"


def scores_root(partition: str, tiers: str = TIER2, root: str = RESULTS) -> str:
    """One view's Parquet scores, scored for ``tiers`` (:data:`TIER1` or :data:`TIER2`)."""
    return f"{root}/scores/{tiers}/{partition}"


def score_partition(scores_dir: str, model: str, system: str) -> str:
    """One run's scores inside a scores folder: the Hive partition ``model=M/system=S``."""
    return f"{scores_dir}/model={model}/system={system}/part.parquet"


def scores_path(model: str, system: str, partition: str, tiers: str = TIER2, root: str = RESULTS) -> str:
    """One view's scores, a partition of the Parquet dataset under :func:`scores_root`."""
    return score_partition(scores_root(partition, tiers, root), model, system)


def summary_path(model: str, root: str = RESULTS) -> str:
    return f"{root}/summary/{model}.txt"


def model_results(model: str, root: str = RESULTS) -> str:
    """A workflow model's results in one file (``metrobench results``; the schema of ``eval``'s
    ``results/eval/<model>/results.json``, :mod:`metrobench.commands.eval_results`)."""
    return f"{root}/models/{model}/results.json"




def result(name: str, root: str = RESULTS) -> str:
    """A file or folder named inside the results folder (the config's report targets)."""
    return f"{root}/{name}"


def calibration_sample(root: str = RESULTS) -> str:
    """Table 1's calibration sample: the pairs the judges and people rate (published blind file's shape)."""
    return f"{root}/calibration/sample.json"


def calibration_judges(root: str = RESULTS) -> str:
    """The judges' ratings of the calibration sample (id, one column per judge), beside its judge cache."""
    return f"{root}/calibration/judges.csv"


def table_path(name: str, root: str = RESULTS, suffix: str = ".csv") -> str:
    """A paper table (``.csv``, ``.md`` beside it) or figure (``.png``): ``<root>/<name><suffix>``."""
    return f"{root}/{name}{suffix}"


REPEAT_SUFFIX = "-rep"


def repeat_name(model: str, repeat: int) -> str:
    """The model name of one repeated run: the model itself for repeat 1, else ``<model>-rep<i>``."""
    return model if repeat == 1 else f"{model}{REPEAT_SUFFIX}{repeat}"


def repeat_members(repeats: Mapping[str, int], models: Iterable[str]) -> list[str]:
    """Model names with each model of ``repeats`` (name -> k) expanded to its k runs' names."""
    return [repeat_name(model, i) for model in models for i in range(1, repeats.get(model, 1) + 1)]


def repeat_of(repeats: Mapping[str, int], model: str) -> tuple[str, int] | None:
    """(configured model, i) of a repeat's name ``<model>-rep<i>`` (2 <= i <= k), else None."""
    for base, k in repeats.items():
        for i in range(2, k + 1):
            if model == repeat_name(base, i):
                return base, i
    return None


def under(root: str) -> SimpleNamespace:
    """Every path function of this module with ``root`` bound: the layout of one results folder.

    The workflow's paths (``common.smk``: ``paths = layout.under(STUDY.results)``), so that
    the config's ``results`` moves every rule's output and the commands' roots together.
    """
    functions = {name: value for name, value in globals().items()
                 if inspect.isfunction(value) and name != "under" and "root" in inspect.signature(value).parameters}
    return SimpleNamespace(root=root, **{name: partial(value, root=root) for name, value in functions.items()})


def publish_dir(size: str, seed: int | str, root: str = RESULTS) -> str:
    """The folder ``metrobench publish`` assembles for one student: what goes to the hub, as it goes."""
    return f"{root}/publish/{size}/seed{seed}"


def publish_record(size: str, seed: int | str, root: str = RESULTS) -> str:
    """Beside the published folder: the hub repo and the commit ``metrobench publish --push`` made."""
    return f"{publish_dir(size, seed, root)}.push.json"

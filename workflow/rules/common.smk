# Config helpers, path helpers and wildcard constraints shared by every rule file.

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

import yaml

from metrobench import layout
from metrobench.errors import MetrobenchError
from metrobench.footprint.fit import check_study
from metrobench.hub.lock import lock_problems, read_lock
from metrobench.paper import registry
from metrobench.study import RULE_AGENT, read_sources, validate_study
from metrobench import run_job as jobs
from metrobench.training.recipe import load_recipe

# The rules call `metrobench` from the shell: the one installed beside the Python running Snakemake
# comes first on every job's PATH, so `.venv/bin/snakemake` works in a shell without .venv/bin on
# PATH. A rule's conda env (--use-conda) still wins: its activation puts its own bin first. SLURM
# jobs inherit this PATH from the submitting Snakemake (sbatch exports it) and set it again.
_BIN = os.path.dirname(sys.executable)
_PATH = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
if os.path.isfile(os.path.join(_BIN, "metrobench")) and _PATH[:1] != [_BIN]:
    os.environ.update(PATH=os.pathsep.join([_BIN, *_PATH]))

# The study config as one typed model (metrobench/study/): every rule reads STUDY, with
# the model's defaults; a bad key or value stops the plan with one line naming its file.
try:
    STUDY = validate_study(config, read_sources(workflow.configfiles))
except MetrobenchError as exc:
    sys.exit(f"metrobench: error: {exc}")

# Every path a rule and a command share (metrobench/layout.py), under the config's results folder.
paths = layout.under(STUDY.results)
SYSTEMS = list(STUDY.systems)
MODELS = sorted(STUDY.models)
STUDENTS = STUDY.students
TEACHERS = list(STUDY.teachers)
# Seeds by student size: what metrobench.layout's naming rules take.
STUDENT_SEEDS = STUDY.seeds()
SIZES = sorted(STUDENTS)
SEEDS = sorted({seed for spec in STUDENTS.values() for seed in spec.seeds})
# The views of every run (metrobench.run_job): the benchmark's tables read the config's
# partition, Table 4 the held-out one, the teachers' traces the train one, the errata table all.
BENCH_VIEW = STUDY.bench.partition
HOLDOUT_VIEW = jobs.HOLDOUT_VIEW
TEACHER_VIEW = jobs.TEACHER_VIEW
ERRATA_VIEW = jobs.ERRATA_VIEW


def _alternatives(names):
    """A wildcard regex matching exactly these names (a never-matching one if empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


wildcard_constraints:
    system=_alternatives(SYSTEMS),
    model=r"[A-Za-z0-9][A-Za-z0-9._+-]*",
    size=_alternatives(SIZES),
    seed=_alternatives([str(s) for s in SEEDS]),
    partition=_alternatives([ERRATA_VIEW, HOLDOUT_VIEW, TEACHER_VIEW]),
    tiers=_alternatives([layout.TIER1, layout.TIER2]),


# The benchmark root, found as every metrobench command finds it (metrobench.data.root.locate_root):
# data.path, else $METROBENCH_DATA, else ../shared/metrollm-bench, else .data/metrollm-bench; when
# none is there, the pinned clone under results/ (rule fetch_data). Said once, at the plan's start.
DATA_ROOT, DATA_SOURCE = jobs.data_root(STUDY)
DATA_FOUND = DATA_ROOT != paths.data_clone()  # else rule fetch_data clones it there
if workflow.is_main_process:
    said = f"from {DATA_SOURCE}" if DATA_FOUND else DATA_SOURCE
    print(f"benchmark data: {DATA_ROOT} ({said})", file=sys.stderr)


def data_root():
    """The benchmark root: the one found above, or the pinned clone under results/."""
    return DATA_ROOT


def data_flag():
    return f"--data {data_root()}"


def config_flags():
    """The workflow's config files, passed on to commands that read the study config."""
    return " ".join(f"--config {path}" for path in workflow.configfiles)


def merged_config_flag():
    """`--config F`, F the study config as this run sees it, `--config` overrides included.

    For the paper layer (tables, figures), which reruns in seconds: F is named by its
    content's digest, so an override that changes the config reruns them. Model runs keep
    `config_flags()`, so an edited label never restarts them.
    """
    text = yaml.safe_dump(config, sort_keys=True, allow_unicode=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(".snakemake/metrobench") / f"study-{digest}.yaml"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)
    return f"--config {path}"


# Models by name (metrobench/hub/): the config's downloads, resolved into the lock by
# `metrobench lock`. A lock that disagrees with the config stops the plan; an entry not
# locked yet still plans its fetch job, which stops at once naming `metrobench lock`.
DOWNLOADS = STUDY.downloads
try:
    LOCK = read_lock(DOWNLOADS.lock)
except MetrobenchError as exc:
    sys.exit(f"metrobench: error: {exc}")
for _problem in lock_problems(DOWNLOADS, LOCK, DOWNLOADS.lock)[:1]:
    sys.exit(f"metrobench: error: {_problem}")
GGUF_DOWNLOADS = sorted(set(DOWNLOADS.gguf) | set(LOCK.gguf))

# The card (config gpu): each served model's and training job's memory estimate must fit it
# (metrobench/footprint/fit.py), or the plan stops here, before the first job, naming the
# model (gpu.enforce: false starts it anyway). CPU studies configure no card: no check.
_UNFIT = check_study(STUDY, ", ".join(str(path) for path in workflow.configfiles))
if _UNFIT:
    sys.exit(f"metrobench: error: {_UNFIT}")
BASE_DOWNLOADS = DOWNLOADS.bases


def run_job(wildcards):
    """The run job of a `run` rule's wildcards (metrobench.run_job: declared once, for this rule, the
    `metrobench run --view` it runs and `metrobench plan`). A misspelt model or a repeat beyond its
    count stops the plan in one line naming the config."""
    return _run_job(wildcards.model, wildcards.system, wildcards.partition)


@functools.cache
def _run_job(model, system, view):
    """Built once per job: the rule asks for its inputs, settings and GPU need."""
    try:
        return jobs.run_job(STUDY, model, system, view)
    except MetrobenchError as exc:
        sys.exit(
            f"metrobench: error: {', '.join(map(str, workflow.configfiles))}: {exc}"
        )


def unservable(models):
    """The first served GGUF of these models that is neither on disk, nor a download, nor adopted."""
    for model in models:
        gguf = STUDY.config_of(model).serving
        gguf = gguf.gguf if gguf else None
        if gguf and gguf not in GGUF_DOWNLOADS and not Path(gguf).exists():
            return (
                f"model {model} serves {gguf}, which is not there and not among the config's downloads:"
                f" place the file there (then `metrobench lock --adopt {gguf}`), or name its hub repo and"
                f" file under downloads.gguf[{gguf}] and run `metrobench lock`"
            )
    return None


# Checked when the plan is made, not hours into it.
try:
    _UNSERVABLE = unservable(MODELS)
except MetrobenchError as exc:
    _UNSERVABLE = str(exc)
if _UNSERVABLE:
    sys.exit(f"metrobench: error: {_UNSERVABLE}")


def run_inputs(wildcards):
    """A run's inputs (RunJob.inputs): the split, the model's config file, the GGUF it serves."""
    return run_job(wildcards).inputs()


def run_command(wildcards, input):
    """The command of one run job: `metrobench run --view`, which builds the same RunJob from the
    study config as this run sees it (`--config` overrides included) and the job's three names.
    A function of the job's input, so a derived param: Snakemake does not compare it, and a
    reworded command never reruns finished work; `run_settings` is what reruns a job."""
    w = wildcards
    return (
        f"metrobench run {merged_config_flag()} --model {w.model} --system {w.system}"
        f" --view {w.partition}"
    )


def run_settings(wildcards):
    """The settings fingerprint a run is made with (RunJob.fingerprint, what its work transcript
    records): a param Snakemake records and compares, so an edited max_tokens, max_rounds,
    temperature, ... reruns that model's runs. Wildcards only, never input or output (a param
    derived from them is not compared)."""
    return run_job(wildcards).fingerprint()


def llama_cpp_flag():
    """Which llama.cpp converts and quantises the students: `--build B`, the build they are served
    on (config export.converter: serving), else `--llama-cpp C` (llama_cpp_checkout), else none
    (the vendored tree)."""
    build = STUDY.student_converter_build()
    if build:
        return f"--build {build}"
    return f"--llama-cpp {STUDY.llama_cpp_checkout}" if STUDY.llama_cpp_checkout else ""


def recipe_base(size):
    """The base a student's recipe names (a hub id, a local path, or a test model)."""
    return load_recipe(STUDENTS[size].recipe).base


def base_inputs(wildcards):
    """The stamp of the student's pinned base download, when the config pins that base."""
    base = recipe_base(wildcards.size)
    return {"base": paths.base_stamp(base)} if base in BASE_DOWNLOADS else {}


def revision_flag(wildcards):
    """`--revision C`, C the commit the lock pins the student's base at (none when not a download)."""
    entry = LOCK.bases.get(recipe_base(wildcards.size))
    return f"--revision {entry.commit}" if entry else ""


def scores_of(models, partition=BENCH_VIEW, tiers=layout.TIER2):
    """Score files of these models' views of one partition, one per system."""
    return expand(
        paths.scores_path("{model}", "{system}", partition, tiers),
        model=models,
        system=SYSTEMS,
    )


def runs_of(models, partition=BENCH_VIEW):
    """Transcripts of these models' views of one partition, one per system."""
    return expand(
        paths.run_path("{model}", "{system}", partition), model=models, system=SYSTEMS
    )


def judge_flags():
    """Judge and errata options of `metrobench score`, from the config's scoring section."""
    scoring = STUDY.scoring
    flags = [f"--judge {scoring.judge}"]
    for key in ("judge_model", "judge_url", "judge_key_env"):
        if getattr(scoring, key):
            flags.append(f"--{key.replace('_', '-')} {getattr(scoring, key)}")
    if scoring.errata:
        flags.append("--errata " + ",".join(scoring.errata))
    return " ".join(flags)


# What each paper table and figure reads, declared once in metrobench.paper.registry
# (the same declarations `metrobench tables` builds from).
TABLE_INPUTS = {name: registry.inputs(STUDY, name) for name in registry.TABLES}
FIGURE_SOURCE = {name: figure.table for name, figure in registry.FIGURES.items()}


def table_scores(table):
    """The scores folder a table (or a figure's table) reads."""
    return registry.table_scores_root(STUDY, table, paths.root)


def gpu_jobs(wildcards):
    """1 for a model served here (llama.cpp, students), 0 for a hosted API and the rule agent."""
    return run_job(wildcards).gpu


def train_caps(wildcards):
    """`--max-steps N --max-length L`: the caps a student's config entry puts on its recipe (a rehearsal's)."""
    spec = STUDENTS[wildcards.size]
    caps = {"--max-steps": spec.max_steps, "--max-length": spec.max_length}
    return " ".join(f"{flag} {value}" for flag, value in caps.items() if value)


def train_threads(wildcards):
    """Cores a training job holds: the config's train_threads (a GPU trainer needs a few for its
    data; the rest stay free for scoring, merges and hosted runs), else all (CPU training).
    """
    return min(STUDY.train_threads or workflow.cores, workflow.cores)


def merge_mem_mb(wildcards):
    """RAM the streaming merge needs: one hub shard (5 GB), the fp32 adapter, the interpreter.

    It holds one tensor and its delta at a time (1.7 GB measured at Qwen3.5-27B's widths,
    benchmarks/merge_memory.py); 5 GB of shard, 1 GB of Python, torch and transformers, and
    0.012 GB a billion parameters of LoRA adapter (27B: ~6.3 GB). The size is read from the
    student's name (`27b`, `27b-corrected`).
    """
    match = re.match(r"(\d+(?:\.\d+)?)b(?![a-z0-9])", wildcards.size)
    billions = float(match.group(1)) if match else 1.0
    return int((5 + 1 + 0.012 * billions) * 1024)


# The training env: with Qwen3.5's CUDA kernels when config cuda_training is true.
TRAIN_ENV = "../envs/train-cuda.yaml" if STUDY.cuda_training else "../envs/train.yaml"


def intermediate(path):
    """temp(path) when config peft_temporary is true: merged folders and f16 GGUFs go once quantised."""
    return temp(path) if STUDY.peft_temporary else path


# The runs the errata table rescores (default: the rule agent).
ERRATA_MODELS = STUDY.stats.errata_models
# The runs whose protocol options the options table measures: the protocol table's (Table 9's).
PROTOCOL_MODELS = STUDY.members(STUDY.stats_models(STUDY.stats.bootstrap_models))
# The models of the case viewer: the config's view.models, else the leaderboard's, else the rule agent.
VIEW_MODELS = STUDY.view_models()


# GPU memory a GPU job declares (resource gpu_mem_mib, MiB): what the opt-in packed profile
# (profiles/packed) schedules by, offering the card's memory less its headroom; the workstation
# profile (profiles/default) keeps gpu=1, one GPU job at a time, and offers no gpu_mem_mib, so
# there the resource limits nothing. The estimates are the ones `metrobench plan` shows and the
# start's check above holds to the card (metrobench/footprint/). A resource, never a param or a
# flag: a job's command, settings fingerprint and serving record are the same beside another job.
_GPU_CAPACITY = STUDY.gpu.memory_gib - STUDY.gpu.headroom_gib if STUDY.gpu else None


def served_gpu_mib(wildcards):
    """A run's llama-server estimate in MiB (0 off the GPU: a hosted API, the rule agent, a CPU server)."""
    return _served_mib(wildcards.model) if gpu_jobs(wildcards) else 0


@functools.cache
def _served_mib(model):
    from metrobench.footprint.fit import serving_need
    from metrobench.footprint.schedule import need_mib, on_card

    need = serving_need(STUDY, model, LOCK)
    on_gpu = need is not None or on_card(STUDY, model)
    return need_mib(need.gib if need else None, _GPU_CAPACITY) if on_gpu else 0


@functools.cache
def _train_mib(size):
    from metrobench.footprint.fit import training_need
    from metrobench.footprint.schedule import need_mib

    need = training_need(STUDY, size)
    return need_mib(need.gib if need else None, _GPU_CAPACITY)


def train_gpu_mib(wildcards):
    """A training job's QLoRA peak in MiB: the larger of the estimate and the GPU kit's measurement
    (metrobench/footprint/fit.py, training_need); with none (CPU training, a tiny base), the whole
    card when one is configured, so it runs alone."""
    return _train_mib(wildcards.size)

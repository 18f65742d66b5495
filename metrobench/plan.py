"""``metrobench plan``: what a Snakemake target costs before it starts, and what it cost after.

Contract: :func:`plan` asks Snakemake for the dry run of the targets on the given
config files (``snakemake -n --printshellcmds``, the workflow's own plan, so the
numbers follow the rules as they are) and reads each planned job's rule, wildcards,
benchmark file and shell command. The stage comes from the ``metrobench`` command
the job runs (run: runs, score, train, merge / export-gguf /
quantize: export, ...), prefixed ``teacher`` for the train view (the teachers').
A run job is read from its wildcards, never from its command line: the
:class:`~metrobench.run_job.RunJob` the ``run`` rule and ``metrobench run --view`` build
(:func:`~metrobench.run_job.run_job`) gives its cases, settings fingerprint and
transcripts. Its cases are those it selects, less the cases its work transcript
already holds as done, by the runner's own resume rule
(:func:`~metrobench.agents.runner.run.resume_state`: a case that ended on the
infrastructure is redone and counted; a transcript made under other settings holds
none, its run starts afresh; a case whose data changed is run again) — and less those
an earlier planned view of the same work transcript runs, so a case two targets read
counts once. A score's cases are its runs' views. When the split file is not written
yet, the split is drawn from the config's partition settings (with the paper's, that
is the committed split).

The estimate comes from the config's ``throughput`` section
(:class:`~metrobench.study.Throughput`): a local model's case costs
``prompt_tokens / prompt_tps + completion_tokens / decode_tps`` GPU-seconds, a
hosted model's case ``prompt_tokens`` input and ``completion_tokens`` output API
tokens, a scored case with a judge on the judge's tokens, a training job its
size's ``train_minutes``. A scripted model (the rule agent: in-process,
:data:`~metrobench.agents.runner.config.IN_PROCESS`), scoring and the paper layer cost
neither. A cost with no matching entry is unknown (``?``), never guessed. Each entry says where its
figures come from (:class:`~metrobench.study.Source`); :func:`rate_sources` words it for the entries a
plan used, and how many of its GPU speeds were measured.

Each row also shows its jobs' peak GPU memory (the largest of its jobs: a local run's
llama-server, a training job's QLoRA; :mod:`metrobench.footprint`) and whether it fits the
configured card (``gpu``); a plan with a job that does not fit is refused in one line
naming the row, its estimate and the card, before anything starts (``force``: shown
anyway, and Snakemake's dry run told ``gpu.enforce: false``). Below the table, the disk
the planned jobs fetch and write at their peak (:func:`metrobench.footprint.disk.jobs_disk`).
Beside them, :func:`timeout_warnings`: each served row of the plan whose ``max_tokens`` cannot be
generated within its ``timeout_s`` at its configured decode rate a slot, named before it starts.

After a run, a job's Snakemake benchmark file (``benchmark:``, column ``s``)
gives its wall time: a planned job that has one is counted under ``ran``, with
the estimate of those jobs beside their measured hours. Plan with ``--all``
(Snakemake's ``--forceall``) to see every job of the targets, finished ones too.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import math
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench import layout
from metrobench.agents.runner.config import IN_PROCESS
from metrobench.run_job import TEACHER_VIEW, RunJob, run_config, run_job
from metrobench.errors import MetrobenchError
from metrobench.footprint.fit import GpuNeed, fits, refusal, serving_need, study_lock, training_need
from metrobench.study import Rate, StudyConfig, load_study

if TYPE_CHECKING:
    from metrobench.data import Benchmark
    from metrobench.data.models import Case
    from metrobench.transcripts.records import CaseRecord
    from metrobench.footprint.disk import DiskPlan
    from metrobench.hub.lock import LockFile

DEFAULT_CONFIG = "config/config.yaml"
TEACHER = "teacher"
#: The stage of each ``metrobench`` command a rule runs; any other command is the report layer.
COMMAND_STAGE = {
    "run": "runs", "bench": "runs", "score": "score", "trainset": "trainset", "train": "train",
    "merge": "export", "export-gguf": "export", "quantize": "export", "fetch-data": "data",
    "fetch-model": "data", "verify-data": "data", "partition": "data",
}
#: The command the ``run`` rule runs (``bench``: its older name, in plans printed before).
RUN_COMMANDS = ("run", "bench")
#: The order the table lists stages in (the order they run in); others last, by name.
STAGE_ORDER = ("data", f"{TEACHER} runs", f"{TEACHER} score", "trainset", "train", "export", "runs", "score",
               "report")
RULE_HEADER = re.compile(r"^(?:local)?rule (\w+):\s*$")
FIELD = re.compile(r"^\s+(\w+): (.*)$")
SHELL_PREFIX = "Shell command: "


@dataclass
class Job:
    """One planned job as the dry run prints it."""

    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    benchmark: str | None = None
    shell: str = ""


@dataclass
class Cost:
    """One job's estimate: GPU-seconds and API tokens (``None``: no throughput entry says)."""

    gpu_s: float | None = 0.0
    api_in: float | None = 0.0
    api_out: float | None = 0.0


@dataclass
class PlanRow:
    """One (stage, model) line of the table, summed over its jobs."""

    stage: str
    model: str
    jobs: int = 0
    cases: int = 0
    gpu_s: float | None = 0.0
    api_in: float | None = 0.0
    api_out: float | None = 0.0
    ran: int = 0
    ran_est_s: float | None = 0.0
    ran_actual_s: float = 0.0
    gpu: GpuNeed | None = None      # the largest GPU estimate of its jobs (None: no GPU job)
    fits: bool | None = None        # against the configured card (None: no card, or no GPU job)


# --- the dry run -------------------------------------------------------------------------------

def dry_run(targets: Sequence[str], configfiles: Sequence[str], overrides: Sequence[str] = (),
            forceall: bool = False, cwd: Path | None = None) -> str:
    """Snakemake's dry-run text for the targets (its stdout and stderr together)."""
    args = [sys.executable, "-m", "snakemake", "--dry-run", "--printshellcmds", "--nolock", "--cores", "1",
            "--configfile", *configfiles]
    if overrides:
        args += ["--config", *overrides]
    if forceall:
        args.append("--forceall")
    args += ["--", *targets]
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise MetrobenchError(f"snakemake could not plan {' '.join(targets)}: {_snakemake_error(text)}")
    return text


def _snakemake_error(text: str) -> str:
    """The line that says why a plan failed: the workflow's own error line, else Snakemake's last words."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [line.removeprefix("metrobench: error: ") for line in lines if line.startswith("metrobench: error:")]
    if ours:
        return ours[-1]
    errors = [i for i, line in enumerate(lines) if "Error" in line or "Exception" in line]
    if errors:
        return " ".join(lines[errors[-1]:errors[-1] + 3])
    return lines[-1] if lines else "no output"


def parse_jobs(text: str) -> list[Job]:
    """The jobs of a ``--dry-run --printshellcmds`` output, in the order printed.

    A job is a ``rule NAME:`` (or ``localrule``) line, its indented ``key: value``
    lines, and its ``Shell command:`` (continued on the following lines up to a blank one).
    """
    jobs: list[Job] = []
    job: Job | None = None
    for line in text.splitlines():
        header = RULE_HEADER.match(line)
        if header:
            job = Job(header.group(1))
            jobs.append(job)
        elif job is None:
            continue
        elif line.startswith(SHELL_PREFIX):
            job.shell = line.removeprefix(SHELL_PREFIX).strip()
        elif not line.strip() or line.startswith(("[", "Job stats:")):
            job = None if job.shell or line.strip() else job
        elif job.shell:
            job.shell += " " + line.strip()
        elif match := FIELD.match(line):
            _read_field(job, match.group(1), match.group(2))
    return jobs


def _read_field(job: Job, key: str, value: str) -> None:
    if key == "wildcards":
        job.wildcards = dict(pair.split("=", 1) for pair in value.split(", ") if "=" in pair)
    elif key == "benchmark":
        job.benchmark = value.strip()


# --- what a job does ---------------------------------------------------------------------------

def _command(shell: str) -> list[str]:
    """The words of the job's ``metrobench`` command (up to the first redirection or chaining)."""
    try:
        words = shlex.split(shell)
    except ValueError:
        words = shell.split()
    if "metrobench" not in words:
        return []
    words = words[words.index("metrobench") + 1:]
    stops = [i for i, w in enumerate(words) if w in (">", "2>&1", "&&", "|", ";", "||") or w.startswith(">")]
    return words[: stops[0]] if stops else words


def job_stage(job: Job, words: list[str]) -> str:
    stage = COMMAND_STAGE.get(words[0], "report") if words else "report"
    teaching = job.wildcards.get("partition") == "train" or TEACHER in job.rule
    return f"{TEACHER} {stage}" if teaching and stage in ("runs", "score") else stage


def model_of(job: Job) -> str:
    """The model a job concerns: its model wildcard, a student group for training, else ``-``."""
    if "model" in job.wildcards:
        return job.wildcards["model"]
    if "size" in job.wildcards:
        return layout.student_group(job.wildcards["size"])
    return "-"


class CaseCounter:
    """Counts the cases a run or score job selects, with the benchmark and split read once."""

    def __init__(self, study: StudyConfig, root: Path = Path(".")) -> None:
        self.study = study
        self.root = root  # the workflow's folder: the jobs' relative paths are relative to it
        self._benches: dict[str, Benchmark] = {}
        self._splits: dict[tuple[str, str], dict[str, str]] = {}
        self._claimed: dict[Path, set[str]] = {}  # work transcript -> cases a planned run holds or runs
        self.views: dict[str, int] = {}  # a planned run's view -> the cases of its view
        self._current: dict[Path, dict[str, CaseRecord]] = {}  # work transcript -> its current records

    def _bench(self, data: str | None) -> Benchmark:
        from metrobench.data import Benchmark

        root = self.root / data if data and (self.root / data).is_dir() else None  # not fetched: METROBENCH_DATA
        key = str(root)
        if key not in self._benches:
            try:
                self._benches[key] = Benchmark.open(root)
            except MetrobenchError as exc:
                raise MetrobenchError(f"plan: counting cases needs the benchmark data ({data} is not there): "
                                      f"{exc}") from None
        return self._benches[key]

    def _split(self, bench: Benchmark, split: str | None) -> dict[str, str]:
        from metrobench.data.partition import load_split, partition_benchmark, partition_of

        key = (str(bench.root), str(split))
        if key not in self._splits:
            if split and (self.root / split).is_file():
                self._splits[key] = load_split(bench, self.root / split)
            else:  # not written yet: drawn as the partition rule will draw it
                settings = self.study.partition
                document = partition_benchmark(bench, seed=settings.seed, frac=settings.frac_holdout,
                                               warn=lambda message: None)
                self._splits[key] = partition_of(document)
        return self._splits[key]

    def selected_cases(self, run: RunJob) -> list[Case]:
        """The cases a run job selects."""
        bench = self._bench(run.data)
        return run.cases(bench, self._split(bench, run.split))

    def count_run(self, run: RunJob) -> int:
        """A run's case runs: its selection, less what its work transcript holds done or an earlier view of
        it runs, by the runner's own resume rule (:func:`~metrobench.agents.runner.run.resume_state`): a
        transcript made under other settings holds nothing done (its run sets it aside), a case whose data
        changed is run again, once for all the views of it."""
        from metrobench.agents.runner.run import case_hash, changed_cases

        cases = self.selected_cases(run)
        ids = {case.id for case in cases}
        self.views[run.out] = len(ids)
        transcript = self.root / (run.work or run.out)
        if transcript not in self._claimed:
            self._current[transcript] = _current(transcript, run.fingerprint())
            self._claimed[transcript] = set(self._current[transcript])
        claimed, current = self._claimed[transcript], self._current[transcript]
        stale = changed_cases(current, {case.id: case_hash(case) for case in cases})
        for case_id in stale:
            del current[case_id]  # this job reruns it: a later view of the transcript finds it done
        todo = (ids - claimed) | set(stale)
        claimed |= todo
        return len(todo)

    def count_score(self, job: Job) -> int:
        """A score's cases: its runs' views, as planned, else as written."""
        views = [layout.run_path(job.wildcards["model"], system, job.wildcards["partition"], self.study.results)
                 for system in self.study.systems]
        return sum(self.views[view] if view in self.views else len(_recorded(self.root / view)) for view in views)


def _recorded(path: Path) -> set[str]:
    """Case ids a transcript holds as done (:func:`_current`)."""
    return set(_current(path))


def _current(path: Path, fingerprint: str | None = None) -> dict[str, CaseRecord]:
    """The records a transcript holds as done, by the runner's resume rule
    (:func:`~metrobench.agents.runner.run.resume_state`; none when it is not there): a case whose records
    all ended on the infrastructure is not done, a rerun redoes it; with ``fingerprint``, none either
    when the transcript was made under other settings, as the resume then sets it aside."""
    from metrobench.agents.runner.run import resume_state
    from metrobench.transcripts.records import read_transcript

    if not path.is_file():
        return {}
    state = resume_state(*read_transcript(path), fingerprint, {})
    return dict(state.current) if state is not None else {}


# --- the estimate ------------------------------------------------------------------------------

def rate_of(study: StudyConfig, model: str, local: bool) -> Rate | None:
    """The model's throughput entry: the first ``models`` key it matches, else the local or hosted default."""
    entry = rate_entry(study, model, local)
    return entry[1] if entry else None


def rate_entry(study: StudyConfig, model: str, local: bool) -> tuple[str, Rate] | None:
    """(the entry's name, the entry) :func:`rate_of` takes: a ``models`` key, else ``local`` or ``hosted``."""
    throughput = study.throughput
    for pattern, rate in throughput.models.items():
        if fnmatch.fnmatchcase(model, pattern):
            return pattern, rate
    default = throughput.local if local else throughput.hosted
    return (("local" if local else "hosted"), default) if default is not None else None


def provider_of(study: StudyConfig, model: str) -> str:
    """A run's provider as its settings say (:func:`metrobench.run_job.run_config`; a trained student is
    ``llama_cpp``)."""
    return run_config(study, model).provider


def is_local(study: StudyConfig, model: str) -> bool:
    """Whether a model is served on the workstation's GPU (llama.cpp, or a trained student)."""
    return provider_of(study, model) == "llama_cpp"


def run_cost(study: StudyConfig, model: str, cases: int) -> Cost:
    """A benchmark or teacher run of ``cases`` cases: GPU-seconds when local, API tokens when hosted,
    nothing in-process (a scripted model)."""
    if provider_of(study, model) in IN_PROCESS:
        return Cost()
    local = is_local(study, model)
    rate = rate_of(study, model, local)
    if rate is None:
        return Cost(None, 0.0, 0.0) if local else Cost(0.0, None, None)
    if not local:
        return Cost(0.0, cases * rate.prompt_tokens, cases * rate.completion_tokens)
    if rate.prompt_tps is None or rate.decode_tps is None:
        return Cost(None, 0.0, 0.0)
    per_case = rate.prompt_tokens / rate.prompt_tps + rate.completion_tokens / rate.decode_tps
    return Cost(cases * per_case, 0.0, 0.0)


def timeout_warnings(study: StudyConfig, models: Iterable[str]) -> list[str]:
    """A line for each served model whose ``max_tokens`` cannot be generated within its ``timeout_s``.

    Why: llama-server shares its decode rate (``throughput``'s ``decode_tps``, the server's aggregate)
    among the requests it decodes at once, the model's ``concurrency`` up to its ``serving.parallel``
    slots; a reply of ``max_tokens`` at that per-slot rate that needs longer than one request's
    ``timeout_s`` ends in a time-out, retried and then failed as infrastructure, hours into a run.
    Said by ``metrobench plan`` before anything starts. A model with no decode rate (no ``throughput``
    entry: its GPU-hours show ``?``) is not checked; a hosted or scripted one has no slots here."""
    out: list[str] = []
    for model in dict.fromkeys(models):
        if not is_local(study, model):
            continue
        rate = rate_of(study, model, True)
        if rate is None or rate.decode_tps is None:
            continue
        try:
            cfg = run_config(study, model)
        except MetrobenchError:
            continue        # its run job stops on the same error, naming it
        slots = min(cfg.parallel, cfg.serving.parallel) if cfg.serving is not None else cfg.parallel
        per_slot = rate.decode_tps / max(1, slots)
        needed = cfg.max_tokens / per_slot
        if needed > cfg.timeout_s:
            out.append(
                f"model {model}: max_tokens {cfg.max_tokens:,} at {per_slot:g} tokens/s a slot ({rate.decode_tps:g} "
                f"decode_tps over {slots} slot{'s' if slots != 1 else ''}) takes about {needed:.0f} s, more than its "
                f"timeout_s {cfg.timeout_s:g}: a reply that long times out; raise this row's timeout_s (to at "
                f"least {math.ceil(needed / 10) * 10}) or lower its max_tokens (to at most "
                f"{math.floor(per_slot * cfg.timeout_s):,})")
    return out


def train_minutes(study: StudyConfig, size: str) -> float | None:
    """A size's minutes per seed; ``27b-corrected`` falls back to ``27b``."""
    minutes = study.throughput.train_minutes
    return minutes.get(size, minutes.get(size.split("-", 1)[0]))


def job_cost(study: StudyConfig, job: Job, words: list[str], cases: int) -> Cost:
    """One job's estimate from its command (see the module docstring)."""
    command = words[0] if words else ""
    if command in RUN_COMMANDS and "model" in job.wildcards:
        return run_cost(study, job.wildcards["model"], cases)
    if command == "score" and job.wildcards.get("tiers") == layout.TIER2 and study.scoring.judge != "none":
        judge = study.throughput.judge
        return Cost(0.0, cases * judge.prompt_tokens, cases * judge.completion_tokens) if judge \
            else Cost(0.0, None, None)
    if command == "train" and "size" in job.wildcards:
        minutes = train_minutes(study, job.wildcards["size"])
        return Cost(minutes * 60 if minutes is not None else None)
    return Cost()


class GpuNeeds:
    """Each job's GPU estimate (a local run's server, a training job), computed once per model or size."""

    def __init__(self, study: StudyConfig, root: Path) -> None:
        self.study, self.root = study, root
        self._lock: LockFile | None = None
        self._lock_read = False
        self._cache: dict[tuple[str, str], GpuNeed | None] = {}

    def of(self, job: Job, words: list[str]) -> GpuNeed | None:
        command = words[0] if words else ""
        if command in RUN_COMMANDS and "model" in job.wildcards:
            key = ("serving", job.wildcards["model"])
        elif command == "train" and "size" in job.wildcards:
            key = ("training", job.wildcards["size"])
        else:
            return None
        if key not in self._cache:
            with contextlib.chdir(self.root):   # the config's paths (GGUFs, lock) are the workflow's
                if not self._lock_read:
                    self._lock, self._lock_read = study_lock(self.study), True
                self._cache[key] = serving_need(self.study, key[1], self._lock) if key[0] == "serving" \
                    else training_need(self.study, key[1])
        return self._cache[key]


# --- the table ---------------------------------------------------------------------------------

def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def benchmark_seconds(path: Path) -> float | None:
    """The wall seconds (column ``s``, mean over its repeats) a Snakemake benchmark file records."""
    if not path.is_file():
        return None
    try:
        with path.open(newline="") as handle:
            values = [float(row["s"]) for row in csv.DictReader(handle, delimiter="\t")]
    except (KeyError, TypeError, ValueError) as exc:
        raise MetrobenchError(f"{path}: not a Snakemake benchmark file (column s: {exc})") from None
    return sum(values) / len(values) if values else None


def _counting_order(item: tuple[Job, list[str]]) -> tuple[bool, bool, str, str, str]:
    """Runs first (scores read their views), the teachers' train views first among them (they run first:
    the students wait on them), then by model, system and view: a case two views of one work transcript
    read is charged to the same view whatever order Snakemake printed the jobs in."""
    job, words = item
    run = bool(words) and words[0] in RUN_COMMANDS
    view = job.wildcards.get("partition", "")
    return (not run, view != TEACHER_VIEW, job.wildcards.get("model", ""), job.wildcards.get("system", ""), view)


def tabulate(study: StudyConfig, jobs: Iterable[Job], root: Path = Path("."), config: str = "the config") -> list[PlanRow]:
    """One row per (stage, model), in the order the stages and models first appear.

    A run of a model ``config`` (its files, named in the error) does not have (a misspelt name, a
    repeat beyond its ``repeats``: :meth:`StudyConfig.unknown_model`) is an error, never a priced row."""
    counter = CaseCounter(study, root)
    gpu = GpuNeeds(study, root)
    rows: dict[tuple[str, str], PlanRow] = {}
    planned = [(job, _command(job.shell)) for job in jobs]
    planned.sort(key=_counting_order)
    for job, words in planned:
        stage = job_stage(job, words)
        cases = 0
        if words and words[0] in RUN_COMMANDS and {"model", "system", "partition"} <= set(job.wildcards):
            try:
                with contextlib.chdir(root):    # the config's paths (model configs, recipes, data) are the workflow's
                    run = run_job(study, job.wildcards["model"], job.wildcards["system"], job.wildcards["partition"])
            except MetrobenchError as exc:
                raise MetrobenchError(f"plan: {config}: {exc}") from None
            cases = counter.count_run(run)
        elif words and words[0] == "score" and {"model", "partition"} <= set(job.wildcards):
            cases = counter.count_score(job)
        cost = job_cost(study, job, words, cases)
        row = rows.setdefault((stage, model_of(job)), PlanRow(stage, model_of(job)))
        row.jobs += 1
        row.cases += cases
        need = gpu.of(job, words)
        if need is not None and (row.gpu is None or need.gib > row.gpu.gib):
            row.gpu, row.fits = need, fits(study, need)
        row.gpu_s, row.api_in, row.api_out = (_add(row.gpu_s, cost.gpu_s), _add(row.api_in, cost.api_in),
                                              _add(row.api_out, cost.api_out))
        actual = benchmark_seconds(root / job.benchmark) if job.benchmark else None
        if actual is not None:
            row.ran += 1
            row.ran_est_s = _add(row.ran_est_s, cost.gpu_s)
            row.ran_actual_s += actual
    return sorted(rows.values(), key=_row_order)


def _row_order(row: PlanRow) -> tuple[int, str, str]:
    stage = STAGE_ORDER.index(row.stage) if row.stage in STAGE_ORDER else len(STAGE_ORDER)
    return stage, row.stage, row.model


def total(rows: Sequence[PlanRow]) -> PlanRow:
    """The rows summed; case runs are the model runs' (a score row's cases are cases scored, not run)."""
    out = PlanRow("total", "")
    for row in rows:
        out.jobs += row.jobs
        out.cases += row.cases if row.stage.endswith("runs") else 0
        out.ran += row.ran
        out.ran_actual_s += row.ran_actual_s
        out.gpu_s, out.api_in, out.api_out, out.ran_est_s = (
            _add(out.gpu_s, row.gpu_s), _add(out.api_in, row.api_in), _add(out.api_out, row.api_out),
            _add(out.ran_est_s, row.ran_est_s))
    return out


def _hours(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 3600:.2f}"


def _tokens(count: float | None) -> str:
    return "?" if count is None else f"{count:,.0f}"


def _fit(row: PlanRow) -> str:
    return "-" if row.fits is None else "yes" if row.fits else "NO"


def plan_table(rows: Sequence[PlanRow]) -> str:
    """The table as aligned text; the ran / est. h / actual h columns when any planned job has run.

    ``GPU GiB``: the row's largest GPU estimate (``~``: on inferred widths; ``-``: no GPU job);
    ``fits``: against the configured card (``-``: no card configured, or no GPU job)."""
    ran = any(row.ran for row in rows)
    header = ["stage", "model", "jobs", "case runs", "GPU-h", "API in", "API out", "GPU GiB", "fits"]
    header += ["ran", "est. GPU-h", "actual h"] if ran else []
    lines = [header]
    for row in [*rows, total(rows)]:
        cells = [row.stage, row.model, str(row.jobs), f"{row.cases:,}", _hours(row.gpu_s),
                 _tokens(row.api_in), _tokens(row.api_out), row.gpu.shown() if row.gpu else "-", _fit(row)]
        if ran:
            cells += [str(row.ran), _hours(row.ran_est_s) if row.ran else "",
                      _hours(row.ran_actual_s) if row.ran else ""]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    text.insert(-1, text[1])
    return "\n".join(line.rstrip() for line in text)


@dataclass
class Plan:
    """A plan's table and the disk its jobs fetch and write."""

    rows: list[PlanRow]
    disk: DiskPlan
    study: StudyConfig
    warnings: list[str] = field(default_factory=list)   # served rows whose longest reply times out


def plan_of(targets: Sequence[str], configfiles: Sequence[str] = (DEFAULT_CONFIG,), overrides: Sequence[str] = (),
            forceall: bool = False, cwd: Path | None = None, force: bool = False) -> Plan:
    """The targets' plan on these config files (``--config`` overrides applied): its table and its disk.

    A job that does not fit the configured card is one error line unless ``force``
    (then Snakemake's dry run is also told ``gpu.enforce: false``, so it plans it too)."""
    from metrobench.footprint.disk import jobs_disk

    root = cwd or Path(".")
    study = load_study([str(root / path) for path in configfiles], _override_mapping(overrides))
    if force and study.gpu is not None:
        overrides = [*overrides, "gpu={enforce: false}"]
    jobs = parse_jobs(dry_run(targets, configfiles, overrides, forceall, cwd))
    rows = tabulate(study, jobs, root, ", ".join(configfiles))
    problem = refusal(study, [row.gpu for row in rows if row.gpu is not None], f"plan of {' '.join(targets)}")
    if problem and not force and study.gpu is not None and study.gpu.enforce:
        raise MetrobenchError(problem)
    with contextlib.chdir(root):
        disk = jobs_disk(study, study_lock(study), jobs)
        warnings = timeout_warnings(study, [row.model for row in rows if row.stage.endswith("runs")])
    return Plan(rows, disk, study, warnings)


def plan(targets: Sequence[str], configfiles: Sequence[str] = (DEFAULT_CONFIG,), overrides: Sequence[str] = (),
         forceall: bool = False, cwd: Path | None = None, force: bool = False) -> list[PlanRow]:
    """The cost table of the targets' plan on these config files (``--config`` overrides applied)."""
    return plan_of(targets, configfiles, overrides, forceall, cwd, force).rows


def _override_mapping(overrides: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` overrides as Snakemake reads them (values as YAML), for the study the plan prices."""
    import yaml

    out: dict[str, object] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise MetrobenchError(f"--config {item}: expected KEY=VALUE")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem", None) or "not YAML"
            raise MetrobenchError(f"--config {item}: the value of {key} is not YAML ({mark})") from None
    return out


# --- where the prices come from (the report) -------------------------------------------------------

def rate_sources(study: StudyConfig, rows: Sequence[PlanRow]) -> list[str]:
    """A line for each ``throughput`` entry the plan's rows were priced with: the entry, the models it
    priced, and where its figures come from (:class:`~metrobench.study.Source`: measured, scaled,
    published or guess), then how many of the GPU rates it used were measured."""
    from metrobench.study import Source

    used: dict[str, tuple[list[str], list[tuple[str, Source]]]] = {}
    speeds: dict[str, Source] = {}
    for row in rows:
        if not row.stage.endswith("runs") or row.model == "-" or provider_of(study, row.model) in IN_PROCESS:
            continue
        local = is_local(study, row.model)
        entry = rate_entry(study, row.model, local)
        if entry is None:
            used.setdefault("(no entry)", ([], []))[0].append(row.model)
            continue
        key, rate = entry
        said = [("speed", rate.source)] if local else []
        used.setdefault(key, ([], said + [("tokens a case", rate.tokens_source)]))[0].append(row.model)
        if local:
            speeds[key] = rate.source
    if any(row.stage == "train" and row.jobs for row in rows):
        sizes = [row.model for row in rows if row.stage == "train"]
        used["train_minutes"] = (sizes, [("minutes a seed", study.throughput.train_minutes_source)])
    judge = study.throughput.judge
    if judge is not None and any(row.stage.endswith("score") and row.api_in for row in rows):
        used["judge"] = (["the Tier-2 judge"], [("tokens a case", judge.tokens_source)])
    lines = ["rates (the throughput entries this plan is priced with):"]
    notes: dict[str, None] = {}
    for key, (models, sources) in used.items():
        names = list(dict.fromkeys(models))
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        where = ", ".join(f"{what} {source.said()}" for what, source in sources) or "unpriced (?)"
        lines.append(f"  {key} ({shown}): {where}")
        notes.update({f"{source.kind}: {source.note}": None for _, source in sources if source.note})
    lines += [f"  note {note}" for note in notes]
    measured = sum(source.kind in ("measured", "scaled") for source in speeds.values())
    rest = sorted({source.kind for source in speeds.values()} - {"measured", "scaled"})
    lines.append(f"rates measured: {measured} of the {len(speeds)} GPU speed entries this plan uses (scaled "
                 f"ones included)" + (f"; the rest: {' or '.join(rest)}" if rest else ""))
    return lines

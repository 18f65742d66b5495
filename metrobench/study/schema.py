"""The study config's schema: one typed model per section, :class:`StudyConfig` on top (the package's
docstring, :mod:`metrobench.study`, states the contract). Its defaults and descriptions are the documentation
(:mod:`metrobench.study.generated` writes them out); the checks across sections are
:mod:`metrobench.study.checks`'."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, \
    WithJsonSchema, field_validator, model_validator

from metrobench import layout
from metrobench.agents.llama_builds import BuildUse
from metrobench.agents.rule_agent import BUILTIN_ENTRY, MODEL_NAME as RULE_AGENT
from metrobench.agents.runner.config import ModelConfig, Provider
from metrobench.credentials import env_name_problem, url_problem
from metrobench.data.root import SYSTEMS, pinned_release
from metrobench.errors import MetrobenchError
from metrobench.scoring.errata import ERRATA
from metrobench.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from metrobench.vocabulary import SELECTIONS, WHOLE


ANCHOR_PREFIX = "x-"

System = Literal[SYSTEMS]  # type: ignore[valid-type]
Erratum = Literal[tuple(ERRATA)]  # type: ignore[valid-type]
ModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]
StudentSize = Annotated[str, StringConstraints(pattern=r"^[a-z0-9.]+(-[a-z0-9.]+)*$")]
#: A model's settings inline (checked with the runner's ModelConfig by :func:`load_study`).
InlineModel = Annotated[dict[str, Any], WithJsonSchema(
    {"type": "object", "properties": {"provider": {"enum": list(get_args(Provider))}}})]


class Section(BaseModel):
    """A config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


T = TypeVar("T")


def _unique(values: list[T]) -> list[T]:
    duplicates = sorted({str(v) for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"listed more than once: {', '.join(duplicates)}")
    return values


#: A list whose items must differ (uniqueItems in the schema, checked by pydantic too).
Unique = (AfterValidator(_unique), Field(json_schema_extra={"uniqueItems": True}))


def _checked(problem: Callable[[str], str | None]) -> Callable[[str], str]:
    """A validator raising ``problem``'s message (which never quotes a secret: metrobench.credentials)."""
    def check(value: str) -> str:
        message = problem(value)
        if message:
            raise ValueError(message)
        return value

    return check


class Data(Section):
    path: str | None = Field(None, description="local benchmark root; empty: $METROBENCH_DATA, else "
                                              "../shared/metrollm-bench, else .data/metrollm-bench (as the "
                                              "commands find it), else the pinned commit fetched into results/data/")
    commit: str = Field(pinned_release().commit, pattern=r"^[0-9a-f]{40}$",
                        description="the benchmark commit fetched when path is empty")


class Partition(Section):
    seed: int = Field(42, description="seed of the train/held-out partition")
    frac_holdout: float = Field(0.25, gt=0, lt=1, description="held-out fraction of each system x category cell")


class Scoring(Section):
    judge: Literal["none", "anthropic", "openai"] = Field(
        "none", description="Tier-2 judge: none (judged components unscored, composite as bounds), anthropic "
                            "(key in ANTHROPIC_API_KEY) or openai (any OpenAI-compatible endpoint)")
    judge_model: str | None = Field(None, description="the judge's model id")
    judge_url: Annotated[str, AfterValidator(_checked(url_problem))] | None = Field(
        None, description="the openai judge's endpoint")
    judge_key_env: Annotated[str, AfterValidator(_checked(env_name_problem))] | None = Field(
        None, description="environment variable holding the judge's key")
    errata: Annotated[list[Erratum], *Unique] = Field(
        [], description="opt-in corrections of the reference scorer (metrobench/scoring/errata.py); "
                        "empty: the reference's scores")


class CalibrationJudge(Section):
    """One more judge for Table 1 (the configured scoring judge always rates first)."""

    judge: Literal["anthropic", "openai"] = Field(description="its backend: anthropic or openai "
                                                             "(any OpenAI-compatible endpoint)")
    model: str | None = Field(None, description="its model id (anthropic default: claude-haiku-4-5-20251001); "
                                                "the name of its ratings column")
    url: Annotated[str, AfterValidator(_checked(url_problem))] | None = Field(
        None, description="its endpoint (openai)")
    key_env: Annotated[str, AfterValidator(_checked(env_name_problem))] | None = Field(
        None, description="environment variable holding its key")

    @model_validator(mode="after")
    def _openai_names_its_model(self) -> "CalibrationJudge":
        if self.judge == "openai" and not self.model:
            raise ValueError("an openai judge needs its model id (model)")
        return self


class Calibration(Section):
    """Table 1, the judge's calibration (metrobench/calibration/): the sample, its raters, the table."""

    sample: Literal["published", "select"] = Field(
        "published", description="published: the benchmark's blind 100-pair sample "
                                 "(dashboard/calibration_cases_blind.json); select: pairs drawn from "
                                 "calibration.model's scored runs, stratified by rubric")
    model: str | None = Field(None, description="the model whose scored runs `select` draws from")
    count: int = Field(100, ge=1, description="pairs `select` draws")
    seed: int = Field(42, description="seed of `select`'s draw")
    judges: list[CalibrationJudge] = Field([], description="judges rating the sample beside the scoring judge")
    ratings: Annotated[list[str], *Unique] = Field(
        [], description="people's ratings: CSV files, a pair id column (id) then one 0/1/2 column per rater")

    @model_validator(mode="after")
    def _select_names_a_model(self) -> "Calibration":
        if self.sample == "select" and not self.model:
            raise ValueError("sample: select draws from a model's scored runs: name it in calibration.model")
        return self


class Bench(Section):
    partition: Literal[SELECTIONS] = Field(WHOLE, description="the cases each model runs")  # type: ignore[valid-type]
    sample: int | None = Field(None, ge=1, description="a stratified sample of N cases per system (CPU studies)")
    run: list[str] = Field([], description="models whose results/summary/<model>.txt `rule all` builds")


class Trainset(Section):
    # int or float: the number reaches `metrobench trainset --min-tier1` as written (90, not 90.0)
    min_tier1: Annotated[int, Field(ge=0, le=100)] | Annotated[float, Field(ge=0, le=100)] = Field(
        90, description="a teacher trace is kept at this Tier 1 or above")


class Export(Section):
    converter: Literal["serving", "vendored"] = Field(
        "serving", description="which llama.cpp converts and quantises a student: `serving`, the build it "
                               "is served on (student_serving.serving.build: its converter, llama-quantize "
                               "and a load check on its llama-server), else the vendored tree as without a "
                               "build; `vendored`, the vendored tree (or llama_cpp_checkout) always, for a "
                               "build that cannot convert the architecture")


class Student(Section):
    base_model: str = Field(description="the configured model the student is compared with (Table 4)")
    recipe: str = Field(description="the training recipe (peft/recipes/*.yaml)")
    seeds: Annotated[list[int], *Unique] = Field(
        min_length=1, description="one trained student each: the models <size>-peft-s<seed>")
    published: str | None = Field(None, description="the configured model of the paper's released student of "
                                                   "this size (seed 42), shown beside the trained ones in Table 4")
    max_steps: int | None = Field(None, ge=1, description="caps the recipe's optimiser steps (a rehearsal's few "
                                                         "steps, config/rehearsal.yaml); empty: the recipe's")
    max_length: int | None = Field(None, ge=1, description="caps the recipe's max sequence length in tokens (a "
                                                           "rehearsal's short examples); empty: the recipe's")


class Termination(Section):
    min_normal_endings: float = Field(0.98, ge=0, le=1, description="a model is unranked in Table 2 when "
                                      "fewer of its cases end without a harness error")


class LeaderboardRow(Section):
    model: str = Field(description="a configured model, a student model or a student group <size>-peft")
    label: str | None = Field(None, description="the name in the table (default: the model)")
    licence: str = ""
    vendor: str = ""
    reference: bool = Field(False, description="a reference line below the ranked rows (the rule baseline), "
                                               "never ranked")
    family: str = Field("", description="the serving family the row belongs to (Table 5's rows)")


class SensitivityCell(Section):
    row: str = Field(description="the decoding setting (Table 3's row)")
    column: str = Field(description="the model family (Table 3's column)")
    model: str = Field(description="the configured model of this cell")


class Stats(Section):
    n_resamples: int = Field(DEFAULT_RESAMPLES, ge=100, le=1_000_000, description="bootstrap resamples "
                                                                                 "(at most 10^6: memory)")
    seed: int = Field(DEFAULT_SEED, ge=0, le=2**32 - 1, description="bootstrap seed (numpy's range)")
    baseline: str = Field(RULE_AGENT, description="the model Figure 4 profiles")
    bootstrap_models: list[str] = Field([], description="Table 9's models (empty: every benchmarked model: "
                                                         "the leaderboard's, the configured ones, Tables 3 and 10's)")
    comparisons: list[tuple[str, str]] = Field([], description="Table 10's pairs (a, b): the paired delta a - b")
    category_models: list[str] = Field([], description="the category matrix's models (empty: every benchmarked "
                                                        "model, as bootstrap_models)")
    errata_models: list[str] = Field([RULE_AGENT], description="models rescored under each erratum (the errata "
                                                                "table)")


class Report(Section):
    targets: list[str] | None = Field(None, description="what `rule all` builds beside the summaries: files and "
                                                        "folders named inside the results folder (table2.csv, view); "
                                                        "unset: table2.csv (given a leaderboard) and view "
                                                        "(StudyConfig.report_targets)")
    notes: dict[str, str] = Field({}, description="table name -> a note printed under its Markdown table "
                                                  "(what a miniature study can and cannot show)")


class View(Section):
    models: list[str] = Field([], description="the case viewer's models (empty: the leaderboard's, else the "
                                              "rule agent; StudyConfig.view_models)")


HubRepo = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]


class GgufDownload(Section):
    repo: HubRepo = Field(description="the hub repository, owner/name")
    file: str = Field(min_length=1, description="the GGUF's file name in the repository")
    revision: str = Field("main", min_length=1, description="a branch, tag or commit (locked to a commit)")


class BaseDownload(Section):
    revision: str = Field("main", min_length=1, description="a branch, tag or commit (locked to a commit)")
    allow_patterns: list[str] | None = Field(None, description="only files matching these (fnmatch)")
    ignore_patterns: list[str] | None = Field(
        None, description="files skipped (default: vision tower, MTP head, non-safetensors weights)")


class Downloads(Section):
    """What the study fetches from the hub, by name; ``metrobench lock`` resolves it (metrobench/hub/)."""

    lock: str = Field("config/models.lock.yaml", description="the lock file: what each entry resolved to")
    gguf: dict[str, GgufDownload] = Field({}, description="<local path>: {repo, file, revision?}: a served GGUF")
    bases: dict[HubRepo, BaseDownload] = Field(
        {}, description="<hub repo>: {revision?, allow_patterns?, ignore_patterns?}: a student's base weights")

    @field_validator("gguf", mode="before")
    @classmethod
    def _file_paths(cls, value: Any) -> Any:
        """Each key a file path relative to the project folder, normalised as the lock keys it
        (:func:`metrobench.hub.lock.gguf_key`); two spellings of one file are refused."""
        from metrobench.hub.lock import gguf_key, gguf_path_problem

        if not isinstance(value, Mapping):
            return value
        out: dict[Any, Any] = {}
        spelt: dict[str, Any] = {}
        for name, entry in value.items():
            problem = gguf_path_problem(name) if isinstance(name, str) else "is not text"
            if problem:
                raise ValueError(f"key {name!r} {problem}")
            key = gguf_key(name)
            if key in out:
                raise ValueError(f"keys {spelt[key]!r} and {name!r} name one file, {key}: keep one")
            out[key], spelt[key] = entry, name
        return out


#: Where a throughput figure comes from (:class:`Source`): the words the plan prints, strongest first.
SOURCE_KINDS = ("measured", "scaled", "published", "guess")


class Scaling(Section):
    """How rates measured on one card were carried to the configured card: one ratio a rate, each with
    its basis (prompt processing is bound by the card's compute, decoding by its memory bandwidth)."""

    prompt: float = Field(gt=0, description="prompt_tps is the measured prompt rate times this: the configured "
                                            "card's dense compute over the measuring card's")
    decode: float = Field(gt=0, description="decode_tps is the measured decode rate times this: the configured "
                                            "card's memory bandwidth over the measuring card's")
    basis: str = Field(min_length=1, description="the two cards' figures the ratios are made of, and where they "
                                                 "were read (a spec sheet, a whitepaper)")


class Source(Section):
    """Where a throughput entry's figures come from, so a plan can say which of its hours rest on a guess.

    ``measured``: on ``card``, recorded in ``file`` (under benchmarks/recorded/); ``scaled``: measured on
    ``card`` (``file``) and carried to the configured card by ``ratio``; ``published``: a publication's
    figure (``note`` names it: the paper's table); ``guess``: nobody measured it (``note``: what it assumes)."""

    kind: Literal[SOURCE_KINDS] = Field(  # type: ignore[valid-type]
        "guess", description="measured, scaled (from another card by ratio), published or guess; a figure "
                             "no source is given for is a guess")
    card: str | None = Field(None, description="measured, scaled: the card the figure was measured on")
    file: str | None = Field(None, description="measured, scaled: the recorded measurement it was read from "
                                               "(a file under benchmarks/recorded/)")
    ratio: Scaling | None = Field(None, description="scaled: the ratios from the measuring card to the "
                                                    "configured card")
    note: str = Field("", description="what the figure rests on: a publication's table, a guess's assumptions")

    @model_validator(mode="after")
    def _says_what_its_kind_needs(self) -> "Source":
        measuring = self.kind in ("measured", "scaled")
        if measuring and not (self.card and self.file):
            raise ValueError(f"a {self.kind} figure names the card it was measured on (card) and the recorded "
                             "measurement (file)")
        if (self.kind == "scaled") != (self.ratio is not None):
            raise ValueError("a scaled figure gives its ratio (prompt, decode, basis), and only a scaled one")
        if not measuring and (self.card or self.file):
            raise ValueError(f"a {self.kind} figure names no card or recorded file (it was not measured here): "
                             "say what it rests on in note")
        if self.kind == "published" and not self.note:
            raise ValueError("a published figure names where it was published (note: the paper's table)")
        return self

    def said(self) -> str:
        """The source in a few words, as the plan prints it (a note apart: :attr:`note`)."""
        if self.kind == "measured":
            return f"measured on {self.card} ({self.file})"
        if self.kind == "scaled":
            assert self.ratio is not None
            return (f"scaled from {self.card} (prompt x{self.ratio.prompt:g}, decode x{self.ratio.decode:g}; "
                    f"{self.file})")
        return self.kind


class Rate(Section):
    """What one case costs a model: tokens it reads and writes, and how fast its server does so."""

    prompt_tps: float | None = Field(None, gt=0, description="prompt tokens a second its llama-server processes "
                                                             "(local rows; over its parallel slots)")
    decode_tps: float | None = Field(None, gt=0, description="tokens a second its llama-server generates "
                                                             "(local rows; over its parallel slots)")
    prompt_tokens: float = Field(ge=0, description="mean prompt (input) tokens per case, over all its rounds")
    completion_tokens: float = Field(ge=0, description="mean completion (output) tokens per case, reasoning "
                                                       "included")
    source: Source = Field(Source(), description="where prompt_tps and decode_tps come from (local rows)")
    tokens_source: Source = Field(Source(), description="where prompt_tokens and completion_tokens come from")


class Throughput(Section):
    """`metrobench plan`'s cost table (metrobench/plan.py): GPU-hours and API tokens per planned job."""

    models: dict[str, Rate] = Field({}, description="model name or fnmatch pattern -> its rate; the first "
                                                    "matching entry counts")
    local: Rate | None = Field(None, description="a local model's rate when no models entry matches")
    hosted: Rate | None = Field(None, description="a hosted model's rate when no models entry matches")
    judge: Rate | None = Field(None, description="the Tier-2 judge's tokens per scored case (when a judge is on)")
    train_minutes: dict[str, Annotated[float, Field(gt=0)]] = Field({}, description="GPU minutes per trained seed by student size "
                                                            "(<size>-<variant> falls back to <size>)")
    train_minutes_source: Source = Field(Source(), description="where train_minutes come from")


#: The date a price was read: YAML's unquoted 2026-03-01 (a date) or the same text.
PriceDate = Annotated[date, WithJsonSchema({"description": "YYYY-MM-DD (the date the prices were read)"})]


class Price(Section):
    """What a hosted model (or the judge) charges, in US dollars per million tokens, as read on a date."""

    input: float = Field(ge=0, description="USD per million input (prompt) tokens")
    output: float = Field(ge=0, description="USD per million output (completion) tokens")
    reasoning: float | None = Field(None, ge=0, description="USD per million reasoning tokens, where billed "
                                                            "apart (empty: they are output tokens)")
    read: PriceDate = Field(description="the date the prices were read")
    source: str = Field("", description="where they were read (the price page's URL)")


#: The most GiB a ``gpu.memory_gib`` may say: above the largest card there is (288 GB, about 268 GiB, on
#: the largest accelerators of 2025), so nvidia-smi's MiB (32607 for an RTX 5090) or ``.inf`` never makes
#: every job "fit".
MAX_GPU_GIB = 300.0


class Gpu(Section):
    """The card every GPU job runs on (metrobench/footprint/fit.py): what a job's estimate is held against."""

    # Bounded, finite numbers only (the docstring is the schema's description, so the why is here): an
    # unbounded memory (.inf, nan) lets every estimate fit, and a figure above any card is most likely
    # nvidia-smi's MiB, which the refusal says (divide by 1024).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, description="the card, as a reader knows it (RTX 5090)")
    # at most MAX_GPU_GIB (_on_a_card): nvidia-smi's MiB divided by 1024
    memory_gib: float = Field(gt=0, description="its memory in GiB (2^30 bytes): 32 for an RTX 5090")
    headroom_gib: float = Field(1.0, ge=0, description="GiB kept free beside a job's estimate (the estimate "
                                                       "is not a measurement)")
    enforce: bool = Field(True, description="a job whose estimate does not fit stops the plan and the "
                                            "workflow before the first job; false: start it anyway")

    @field_validator("memory_gib")
    @classmethod
    def _on_a_card(cls, value: float) -> float:
        if value > MAX_GPU_GIB:
            hint = f"; MiB? divide by 1024 ({value / 1024:.4g} GiB)" if value >= 1024 else ""
            raise ValueError(f"{value:g} GiB is more than any card has (at most {MAX_GPU_GIB:g}){hint}")
        return value

    @model_validator(mode="after")
    def _room_left(self) -> Gpu:
        if self.headroom_gib >= self.memory_gib:
            raise ValueError(f"headroom_gib {self.headroom_gib:g} leaves nothing of memory_gib "
                             f"{self.memory_gib:g} for a job")
        return self


class StudyConfig(Section):
    """One study: data, models, teachers, students, scoring, statistics and what to report."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "patternProperties": {f"^{ANCHOR_PREFIX}": {"description": "YAML anchors; ignored"}}})

    results: str = Field("results", min_length=1, description="the folder every result is written under (runs, "
                                                             "scores, students, tables; metrobench/layout.py)")
    data: Data = Field(Data(), description="the benchmark data")
    systems: Annotated[list[System], *Unique] = Field(
        list(SYSTEMS), min_length=1, description="the metro systems run, scored and reported")
    partition: Partition = Field(Partition(), description="the train/held-out partition")
    scoring: Scoring = Field(Scoring(), description="the judge and the scoring errata")
    models: dict[ModelName, str | InlineModel] = Field(
        {}, description="model name -> model config (a YAML path or an inline mapping); rule-agent, the "
                        "scripted baseline, is {provider: scripted} unless given here")
    student_serving: InlineModel | None = Field(
        None, description="the model config students are served with (their GGUF replaces serving.gguf)")
    bench: Bench = Field(Bench(), description="which cases the benchmark runs cover")
    teachers: list[str] = Field([], description="models whose train-partition traces make the training set")
    trainset: Trainset = Field(Trainset(), description="the teacher-trace filter")
    students: dict[StudentSize, Student] = Field({}, description="student size -> base, recipe, seeds")
    llama_cpp_checkout: str | None = Field(None, description="llama.cpp checkout whose converter makes GGUFs "
                                                             "(default: the installed llama-cpp-python's)")
    export: Export = Field(Export(), description="GGUF conversion and quantisation of the students")
    peft_temporary: bool = Field(False, description="merged folders and f16 GGUFs are deleted once quantised")
    cuda_training: bool = Field(False, description="train in the CUDA env (workflow/envs/train-cuda.yaml)")
    train_threads: int | None = Field(None, ge=1, description="cores a training job holds (empty: all; a GPU "
                                                              "trainer needs a few, the rest run CPU stages)")
    gpu: Gpu | None = Field(None, description="the card GPU jobs run on (name, memory_gib); each served model's "
                                              "and training job's memory estimate is checked against it before "
                                              "the first job (`metrobench plan`, `doctor`, the workflow); "
                                              "empty: no check (the CPU studies)")
    termination: Termination = Field(Termination(), description="Table 2's ranking rule")
    leaderboard: list[LeaderboardRow] = Field([], description="Table 2's rows")
    sensitivity: list[SensitivityCell] = Field([], description="Table 3's cells")
    stats: Stats = Field(Stats(), description="bootstrap settings and the models of Tables 9, 10, Figure 4")
    calibration: Calibration = Field(Calibration(), description="Table 1: the judge's calibration sample, "
                                                                "its judges and people's ratings")
    report: Report = Field(Report(), description="what `rule all` reports")
    view: View = Field(View(), description="the case viewer (results/view)")
    downloads: Downloads = Field(Downloads(), description="models fetched from the hub by name, locked (metrobench/hub/)")
    throughput: Throughput = Field(Throughput(), description="what a case and a training run cost "
                                                             "(`metrobench plan`)")
    prices: dict[str, Price] = Field({}, description="hosted model name, judge model id or fnmatch pattern -> "
                                                    "its price (the deployment table; the first match counts; "
                                                    "none: not priced)")

    @field_validator("results")
    @classmethod
    def _a_folder_of_its_own(cls, value: str) -> str:
        """Results are written, replaced and cleaned under this folder: never the root or a home folder."""
        where = Path(value).expanduser().resolve()
        if where == Path(where.anchor) or where == Path.home().resolve():
            raise ValueError(f"{value!r} is {'the filesystem root' if where == Path(where.anchor) else 'your home folder'}"
                             ": results are written and replaced under it; give a folder of their own "
                             "(the default: results)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _drop_anchors(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping):
            return {k: v for k, v in raw.items() if not str(k).startswith(ANCHOR_PREFIX)}
        return raw

    def seeds(self) -> dict[str, list[int]]:
        """Seeds by student size (what :mod:`metrobench.layout`'s naming rules take)."""
        return {size: list(spec.seeds) for size, spec in self.students.items()}

    @cached_property
    def repeats(self) -> dict[str, int]:
        """Configured models run more than once -> their ``repeats`` (inline, or in their model config file)."""
        counts = {name: _entry_repeats(name, entry) for name, entry in self.models.items()}
        return {name: k for name, k in counts.items() if k > 1}

    def members(self, models: list[str]) -> list[str]:
        """Model names with each student group ``<size>-peft`` expanded to its seeds' models, and each
        model with ``repeats: k`` to its k runs (:func:`metrobench.layout.repeat_members`)."""
        return layout.repeat_members(self.repeats, layout.members(self.seeds(), models))

    def benchmarked(self) -> list[str]:
        """Every model the study benchmarks, as configured names: the leaderboard's rows, the
        configured models, Table 3's cells and Table 10's pairs, in that order, once each.

        What an empty ``stats.bootstrap_models`` or ``stats.category_models`` stands for, read
        by the tables and by the workflow's rules alike, so that both name the same scores."""
        names = [row.model for row in self.leaderboard] + list(self.models) \
            + [cell.model for cell in self.sensitivity] + [m for pair in self.stats.comparisons for m in pair]
        return list(dict.fromkeys(names))

    def stats_models(self, listed: list[str]) -> list[str]:
        """A statistics table's configured models: those listed, else every benchmarked model."""
        return list(listed) or self.benchmarked()

    def repeat_of(self, model: str) -> tuple[str, int] | None:
        """(configured model, i) of a repeat's name ``<model>-rep<i>`` (i >= 2), else None."""
        return layout.repeat_of(self.repeats, model)

    def configured(self, model: str) -> str:
        """The configured model a run's name stands for: a repeat's model, else the name itself."""
        repeat = self.repeat_of(model)
        return repeat[0] if repeat else model

    def report_targets(self) -> list[str]:
        """What `rule all` builds and so `snakemake --report` shows: ``report.targets``, else Table 2
        (where the leaderboard has rows) and the case viewer, so a small study's report is not empty."""
        if self.report.targets is not None:
            return list(self.report.targets)
        return (["table2.csv"] if self.leaderboard else []) + ["view"]

    def model_entry(self, model: str) -> str | dict[str, Any] | None:
        """A configured model's entry (its config file's path, or its settings inline); ``rule-agent``
        is ``{provider: scripted}`` (:data:`~metrobench.agents.rule_agent.BUILTIN_ENTRY`) unless the
        config gives it one, as every shipped config does: the defaults (``stats.baseline``,
        ``errata_models``, the viewer's) name it. ``None``: no such model."""
        entry = self.models.get(model)
        if entry is None and model == RULE_AGENT:
            return dict(BUILTIN_ENTRY)
        return entry

    def config_of(self, model: str, /, *, repeat: int = 1, gguf: str | None = None,
                  **overrides: Any) -> ModelConfig:
        """The settings a run of configured ``model`` is made with: its ``models`` entry, or with ``gguf``
        (a student's GGUF) ``student_serving`` serving that file; run ``repeat`` of its repeats; the
        ``overrides`` (command-line flags) winning. Through the one door,
        :func:`~metrobench.agents.runner.config.resolve_model_config`."""
        from metrobench.agents.runner.config import resolve_model_config

        entry = self.model_entry(model)
        if entry is None and gguf:
            entry = self.student_serving
        if entry is None:
            raise MetrobenchError(f"model {model!r} is not in the config's models")
        return resolve_model_config(entry, model, gguf=gguf, repeat=repeat, **{"name": model, **overrides})

    def unknown_model(self, model: str) -> str | None:
        """Why ``model`` names no run of this config, in words (``None``: a configured model (the rule
        agent's built-in entry included: :meth:`model_entry`), one of its ``repeats`` runs, or a configured
        student seed). What the workflow and ``metrobench plan`` refuse a target with, instead of planning
        or pricing a run of nothing."""
        if self.model_entry(model) is not None or self.repeat_of(model) \
                or layout.student_of(self.seeds(), model):
            return None
        base, sep, index = model.rpartition(layout.REPEAT_SUFFIX)
        if sep and base in self.models and index.isdigit():
            k = self.repeats.get(base, 1)
            runs = ", ".join(layout.repeat_members(self.repeats, [base]))
            return (f"model {model!r} is no run of the config: {base} runs {k} time{'s' if k != 1 else ''} "
                    f"(repeats: {k}: {runs})")
        known = ", ".join(sorted(self.models)) or "none"
        return f"model {model!r} is not in the config's models ({known})"

    def llama_builds(self) -> dict[str, BuildUse]:
        """The named llama.cpp builds this config serves on (its models' and, with students,
        ``student_serving``'s), by name, each with the rows on it (``make builds``, ``doctor``)."""
        from metrobench.agents.runner.config import resolve_model_config

        rows = [(name, resolve_model_config(entry, name)) for name, entry in self.models.items()]
        if self.students and self.student_serving is not None:
            rows.append(("student_serving", resolve_model_config(self.student_serving, "student")))
        builds: dict[str, BuildUse] = {}
        for name, cfg in rows:
            serving = cfg.serving
            if serving is None or serving.build is None or serving.binary:
                continue              # hosted, the default build, or an executable given by path
            builds.setdefault(serving.build, BuildUse(serving.build)).rows[name] = serving
        return dict(sorted(builds.items()))

    def student_converter_build(self) -> str | None:
        """The named build that converts and quantises the students: ``student_serving``'s build under
        ``export.converter: serving`` (the default), else None (the vendored tree or ``llama_cpp_checkout``)."""
        from metrobench.agents.runner.config import resolve_model_config

        if self.export.converter != "serving" or not self.students or self.student_serving is None:
            return None
        serving = resolve_model_config(self.student_serving, "student").serving
        if serving is None or serving.binary:
            return None
        return serving.build

    def view_models(self) -> list[str]:
        """The case viewer's models: ``view.models``, else the leaderboard's rows, else the rule agent
        (student groups expanded to their seeds; a repeated model shows its first run)."""
        seeds = self.seeds()
        return layout.members(seeds, self.view.models) or \
            layout.members(seeds, [row.model for row in self.leaderboard]) or [RULE_AGENT]


def _entry_repeats(name: str, entry: str | dict[str, Any]) -> int:
    """A ``models`` entry's ``repeats``: inline (checked by :func:`_check_models`), or its file's,
    validated as the runner reads it (a file not there yet: 1; the run names it)."""
    if isinstance(entry, dict):
        return int(entry.get("repeats", 1))
    if not Path(entry).is_file():
        return 1
    from metrobench.agents.runner.config import resolve_model_config

    return resolve_model_config(entry, name).repeats

"""Model runs: ``run`` (against an endpoint) and ``bench`` (serve a GGUF with llama.cpp, then run).

Contract: both append to the ``--out`` transcript and resume it (``--restart``
renames it aside and starts a new one, :func:`metrobench.agents.runner.run.restart_aside`; ``--set-aside``
renames one made under other settings or serving aside, :func:`metrobench.agents.runner.run.set_aside`,
and starts afresh; ``--rerun-changed`` runs again only the cases whose data changed since they were run,
their new records appended after the old; nothing is ever deleted); with ``--work W`` they
append to and resume ``W`` instead, the model's one growing transcript of the system, and then write ``--out`` as the view
of this selection cut from it (:mod:`metrobench.transcripts.views`), waiting for
another job that holds ``W``; an ``--out`` that is ``W`` under another spelling is refused before anything runs; the model's settings come from
:func:`~metrobench.commands.common.model_config` (study config, model config or flags) and the cases from
:func:`~metrobench.commands.common.run_selection`,
recorded in every record (:mod:`metrobench.transcripts.selection`) for ``score`` to read.
Both first check the benchmark's pinned digests, as ``eval`` and ``score`` do
(:func:`~metrobench.commands.common.verified_bench`; ``--no-verify`` skips it): a run made on an
edited copy would be scored against cases the model never saw (``score`` refuses its records).
``bench`` takes the transcript's lock before it starts the server; with ``--require-gpu`` it first
refuses a GPU row (``n_gpu_layers > 0``) on a build that would serve it on the CPU
(:func:`metrobench.agents.serving.require_gpu`), and a GGUF whose own header says it does not fit
the card (``--gpu``, the study config's ``gpu``: :func:`check_fit`), naming the row, its estimate
and the card.

The last line counts the cases per ending. A run that leaves a case on an
infrastructure ending (the endpoint, not the model) or that was stopped (a
refused key, an unknown model, a server that never answered) exits with one
``metrobench: error:`` line, so a Snakemake job fails and builds no table on it;
rerunning the command redoes exactly those cases.

``--teacher`` (the workflow's train view, for every model) runs the model as it teaches
(:func:`run_config`): the scripted rule agent in its teacher mode, into a work transcript of
its own; every other model as itself, sharing its benchmark row's work transcript.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.commands.common import (ModelFlags, Subparsers, add_run_options, model_config, run_selection,
                                        verified_bench)
from metrobench.errors import MetrobenchError
from metrobench.layout import teacher_work_path

if TYPE_CHECKING:
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.agents.runner.run import RunSummary
    from metrobench.data import Benchmark
    from metrobench.data.models import Case
    from metrobench.data.selection import Selection
    from metrobench.study import Gpu


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run a model (an OpenAI-compatible endpoint) on the cases of a system")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="serve a GGUF with llama.cpp, run it on a system, stop the server")
    add_run_options(p)
    p.add_argument("--server-log", help="file for the server's output")
    p.add_argument("--require-gpu", action="store_true",
                   help="refuse a model with serving.n_gpu_layers > 0 on a llama.cpp build that would serve it on "
                        "the CPU (no GPU backend or device), unless serving.allow_cpu (the workflow passes it when "
                        "the config names its gpu); and a GGUF that does not fit the card (--gpu, else the --config "
                        "study's gpu)")
    p.add_argument("--gpu", type=gpu_card, metavar="CARD",
                   help="the card, as the study config's gpu key ('{name: RTX 5090, memory_gib: 32}'): the GGUF's "
                        "estimate from its own header, at the row's n_ctx and slots, must fit it (with headroom_gib "
                        "free) before the server starts, unless enforce: false (the workflow passes the config's)")
    p.set_defaults(func=cmd_bench)


def gpu_card(text: str) -> Gpu:
    """``--gpu``: a card as the study config's ``gpu`` key states it (YAML), checked as the config's is."""
    import yaml
    from pydantic import ValidationError

    from metrobench.study import Gpu

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{text!r} is not YAML (a mapping like the config's gpu)") from None
    try:
        return Gpu.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "gpu"
        raise argparse.ArgumentTypeError(f"field {field}: {err['msg']}") from None


def check_fit(cfg: ModelConfig, args: argparse.Namespace) -> None:
    """Stop a served row whose GGUF, as its header states it, does not fit the card: before its server starts.

    The workflow checked every row at its start, but a GGUF its fetch job had not brought yet was
    estimated from the architecture table's widths (guesses for several rows). Here the file is
    on disk: :func:`metrobench.footprint.fit.run_refusal` reads its header at the row's ``n_ctx``
    and slots. Why the run job and not the fetch job: the fetch knows a file, not the rows that
    serve it nor their contexts, and a student's GGUF is made here, never fetched. The card is
    ``--gpu`` (the workflow passes the study's, ``--config`` overrides included), else with
    ``--require-gpu`` the ``--config`` study's ``gpu``."""
    from metrobench.agents.serving import model_file
    from metrobench.footprint.fit import run_refusal

    gpu = getattr(args, "gpu", None)
    if gpu is None and getattr(args, "require_gpu", False) and args.config:
        from metrobench.commands.common import load_study

        gpu = load_study(args.config).gpu
    if gpu is None or cfg.serving is None:
        return
    problem = run_refusal(cfg, model_file(cfg), gpu)
    if problem:
        raise MetrobenchError(problem)


def _model_config(args: argparse.Namespace) -> ModelConfig:
    """The run's model settings (:func:`~metrobench.commands.common.model_config`) from its flags."""
    return model_config(config=args.config, model_file=args.model_config, model=args.model, gguf=args.gguf,
                        repeat=args.repeat, flags=ModelFlags.parsed(args))


def _run_selection(args: argparse.Namespace, bench: Benchmark) -> tuple[Selection, list[Case]]:
    """The run's cases (:func:`~metrobench.commands.common.run_selection`) from its flags."""
    return run_selection(bench, system=args.system, partition=args.partition, split=args.split,
                         sample=args.sample, cases=args.cases, limit=args.limit)



def run_config(args: argparse.Namespace) -> tuple[ModelConfig, Path | None]:
    """The run's model config and its work transcript (``None``: none, the run appends to ``--out``).

    With ``--teacher``, the model as it teaches (:meth:`ModelConfig.as_teacher`); where that is another
    model than itself (the scripted agent's teacher mode), its work transcript is
    :func:`metrobench.layout.teacher_work_path` of ``--work``, so its two modes never set each other aside.
    Shared with ``metrobench plan``, which reads the same transcript."""
    cfg = _model_config(args)
    work = Path(args.work) if args.work else None
    if getattr(args, "teacher", False):
        teacher = cfg.as_teacher()
        if teacher is not cfg and work is not None:
            work = Path(teacher_work_path(str(work)))
        cfg = teacher
    return cfg, work


def _check_paths(args: argparse.Namespace, work: Path | None) -> None:
    """``--out`` must not be ``--work`` under another spelling (:func:`~metrobench.transcripts.views.check_view_path`)."""
    if work is not None:
        from metrobench.transcripts.views import check_view_path

        check_view_path(work, Path(args.out))


def _report(summary: RunSummary, args: argparse.Namespace, work: Path | None, selection: Selection,
            cases: list[Case]) -> int:
    """Print the counts line; a run that failed on its endpoint raises its one error line; else cut the view."""
    print(f"{summary.path}: ran {summary.ran} case{'' if summary.ran == 1 else 's'} ({summary.failed} failed), "
          f"{summary.skipped} already done, {summary.wall_s:.1f} s; endings: {summary.counts()}", flush=True)
    problem = summary.problem()
    if problem is not None:
        raise MetrobenchError(problem)
    if work is not None:
        from metrobench.transcripts.views import cut_view

        count = cut_view(work, Path(args.out), selection, cases)
        print(f"wrote {args.out}: {count} of {len(cases)} cases, the {selection.partition} view", flush=True)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from metrobench.agents.runner.run import run_model
    from metrobench.scoring.names import check_name

    cfg, work = run_config(args)
    _check_paths(args, work)
    bench = verified_bench(args.data, getattr(args, "no_verify", False), say=True)  # as eval and score verify
    check_name("model", cfg.name)
    selection, cases = _run_selection(args, bench)
    from metrobench.agents.serving_record import hosted_record
    from metrobench.transcripts.records import transcript_lock

    out = work or Path(args.out)
    with transcript_lock(out, wait=work is not None):  # held while the view is cut too
        summary = run_model(cfg, bench.system(args.system), cases, out, restart=args.restart,
                            selection=selection, serving=hosted_record(cfg), set_aside_changed=args.set_aside,
                            rerun_changed=args.rerun_changed, progress_interval=getattr(args, "progress", None))
        return _report(summary, args, work, selection, cases)


def cmd_bench(args: argparse.Namespace) -> int:
    from metrobench.agents.runner.run import run_model
    from metrobench.scoring.names import check_name
    from metrobench.agents.serving import serve_model, serving_record
    from metrobench.transcripts.records import transcript_lock

    cfg, work = run_config(args)
    _check_paths(args, work)
    check_fit(cfg, args)                 # before anything is loaded: the GGUF's own header against the card
    bench = verified_bench(args.data, getattr(args, "no_verify", False), say=True)  # as eval and score verify
    check_name("model", cfg.name)
    selection, cases = _run_selection(args, bench)
    log = Path(args.server_log) if args.server_log else None
    out = work or Path(args.out)
    with transcript_lock(out, wait=work is not None):  # before serving, and while the view is cut
        with serve_model(cfg, log_path=log, gpu=args.require_gpu) as url:
            summary = run_model(cfg, bench.system(args.system), cases, out, base_url=url,
                                restart=args.restart, selection=selection, serving=serving_record(cfg, url),
                                set_aside_changed=args.set_aside, rerun_changed=args.rerun_changed,
                                progress_interval=getattr(args, "progress", None))
        return _report(summary, args, work, selection, cases)  # after the server has stopped

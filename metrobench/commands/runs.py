"""``metrobench run``: run a model on the cases of a system (``bench``: the same command, by its older name).

Contract: one command executes a :class:`~metrobench.run_job.RunJob`, built one of two ways:

- ``--config F --model M --system S --view V``: the study's run job of ``M`` on ``S`` for view ``V``,
  as the workflow's ``run`` rule declares it (:func:`metrobench.run_job.run_job`: its settings, cases,
  work transcript and view, card); what the rule runs. Flags the job declares itself are refused beside it.
- otherwise from flags: the model's settings from :func:`~metrobench.commands.common.model_config` (a
  study config, a model config or flags), the cases from ``--system``/``--partition``/``--split``/
  ``--sample``/``--cases``/``--limit``, the transcript ``--out`` (``--work W``: run and resume ``W``,
  the model's one growing transcript of the system, then write ``--out`` as this selection's view of it,
  :mod:`metrobench.transcripts.views`).

Executing it (:func:`execute`): the transcript is appended to and resumed (``--restart`` renames it aside
and starts anew, :func:`metrobench.agents.runner.run.restart_aside`; ``--set-aside`` renames one made under
other settings or serving aside and starts afresh; ``--rerun-changed`` runs again only the cases whose data
changed; a study's run job does both, as the workflow did; nothing is ever deleted). The benchmark's pinned
digests are checked first (:func:`~metrobench.commands.common.verified_bench`; ``--no-verify`` skips it).
A model with a ``serving`` block is served with llama.cpp for the run and stopped after it (the transcript's
lock taken before the server starts); any other is called at its endpoint or run in-process (scripted).
With a card (``--gpu``, a study's ``gpu``), a GPU row on a build that would serve it on the CPU is refused
(:func:`metrobench.agents.serving.require_gpu`), and so is a GGUF whose own header says it does not fit the
card (:func:`check_fit`), before anything is loaded.

The last line counts the cases per ending. A run that leaves a case on an infrastructure ending (the
endpoint, not the model) or that was stopped (a refused key, an unknown model, a server that never
answered) exits with one ``metrobench: error:`` line, so a Snakemake job fails and builds no table on it;
rerunning the command redoes exactly those cases.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.commands.common import ModelFlags, Subparsers, add_run_options, load_study, model_config, verified_bench
from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.agents.runner.run import RunSummary
    from metrobench.data.models import Case
    from metrobench.data.selection import Selection
    from metrobench.run_job import RunJob
    from metrobench.study import Gpu


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", aliases=["bench"],
                       help="run a model on the cases of a system: a study's run job (--view), or one given by "
                            "flags; a model with a serving block is served with llama.cpp for the run")
    add_run_options(p)
    p.add_argument("--view", help="with --config, --model and --system: the study's run job for this view (a "
                                  "partition: the config's bench.partition, holdout, train, all), as the workflow "
                                  "runs it: its settings, cases, work transcript and view all from the config")
    p.add_argument("--server-log", help="file for the server's output")
    p.add_argument("--require-gpu", action="store_true",
                   help="refuse a model with serving.n_gpu_layers > 0 on a llama.cpp build that would serve it on "
                        "the CPU (no GPU backend or device), unless serving.allow_cpu; and a GGUF that does not fit "
                        "the card (--gpu, else the --config study's gpu). A study's run job (--view) sets it when "
                        "the config names its gpu")
    p.add_argument("--gpu", type=gpu_card, metavar="CARD",
                   help="the card, as the study config's gpu key ('{name: RTX 5090, memory_gib: 32}'): the GGUF's "
                        "estimate from its own header, at the row's n_ctx and slots, must fit it (with headroom_gib "
                        "free) before the server starts, unless enforce: false")
    p.set_defaults(func=cmd_run)


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


def check_fit(cfg: ModelConfig, card: Gpu | None) -> None:
    """Stop a served row whose GGUF, as its header states it, does not fit the ``card``: before its server starts.

    The workflow checked every row at its start, but a GGUF its fetch job had not brought yet was
    estimated from the architecture table's widths (guesses for several rows). Here the file is
    on disk: :func:`metrobench.footprint.fit.run_refusal` reads its header at the row's ``n_ctx``
    and slots. Why the run job and not the fetch job: the fetch knows a file, not the rows that
    serve it nor their contexts, and a student's GGUF is made here, never fetched."""
    from metrobench.agents.serving import model_file
    from metrobench.footprint.fit import run_refusal

    if card is None or cfg.serving is None:
        return
    problem = run_refusal(cfg, model_file(cfg), card)
    if problem:
        raise MetrobenchError(problem)


#: Flags a study's run job (``--view``) declares itself: refused beside it, never silently ignored.
JOB_DECLARES = ("out", "work", "split", "sample", "cases", "limit", "gguf", "repeat", "model_config", "data", "gpu",
                *ModelFlags.__dataclass_fields__)


def job_of(args: argparse.Namespace) -> RunJob:
    """The run job the flags name: a study's (``--view``), else one made of the flags themselves."""
    from metrobench.run_job import check_view_names, run_job
    from metrobench.vocabulary import WHOLE

    if args.view is not None:
        if not args.config or not args.model:
            raise MetrobenchError("--view runs a study's run job: give its --config and --model")
        extra = [name for name in JOB_DECLARES if getattr(args, name, None) not in (None, False)]
        if extra or args.partition != WHOLE:
            flag = (extra or ["partition"])[0].replace("_", "-")
            raise MetrobenchError(f"--{flag}: a study's run job (--view) takes it from the config; drop it")
        study = load_study(args.config)
        check_view_names(study, args.system, args.view)
        return run_job(study, args.model, args.system, args.view)
    if not args.out:
        raise MetrobenchError("name the transcript with --out (or run a study's run job with --view)")
    return flags_job(args, system=args.system, out=args.out, work=args.work)


def flags_job(args: argparse.Namespace, *, system: str, out: str, work: str | None) -> RunJob:
    """A run job made of a command's flags (``run`` without ``--view``, ``eval`` for each system): the model's
    settings from :func:`~metrobench.commands.common.model_config`, the cases from the case options, the card
    from ``--gpu``, else with ``--require-gpu`` the ``--config`` study's ``gpu``."""
    from metrobench.run_job import RunJob

    cfg = model_config(config=args.config, model_file=args.model_config, model=args.model, gguf=args.gguf,
                       repeat=args.repeat, flags=ModelFlags.parsed(args))
    card = getattr(args, "gpu", None)
    if card is None and args.require_gpu and args.config:
        card = load_study(args.config).gpu
    return RunJob(model=cfg.name, system=system, view=args.partition, config=cfg, data=args.data,
                  split=args.split, sample=args.sample, work=work, out=out, gguf=args.gguf,
                  model_file=args.model_config, card=card,
                  case_ids=tuple(c.strip() for c in args.cases.split(",") if c.strip()) if args.cases else None,
                  limit=args.limit)


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """How :func:`execute` treats a transcript already there and the server, as the flags say."""
    return {"restart": args.restart, "set_aside": args.set_aside, "rerun_changed": args.rerun_changed,
            "require_gpu": args.require_gpu, "no_verify": args.no_verify, "server_log": args.server_log,
            "progress": args.progress}


def cmd_run(args: argparse.Namespace) -> int:
    job = job_of(args)
    options = run_options(args)
    if args.view is not None:    # a study's run job: set aside and rerun changed cases, as the workflow needs
        options.update(set_aside=True, rerun_changed=True, require_gpu=args.require_gpu or job.card is not None)
    return execute(job, **options)


def execute(job: RunJob, *, restart: bool = False, set_aside: bool = False, rerun_changed: bool = False,
            require_gpu: bool = False, no_verify: bool = False, server_log: str | None = None,
            progress: float | None = None) -> int:
    """Run the job (see the module docstring): its cases into its work transcript (else its view), served
    here when its config serves the model; then cut its view, after the server has stopped."""
    from metrobench.agents.runner.run import run_model
    from metrobench.agents.serving import serve_model, serving_record
    from metrobench.scoring.names import check_name
    from metrobench.transcripts.records import transcript_lock
    from metrobench.transcripts.views import check_view_path

    cfg = job.config
    served = job.served_here
    work, out = (Path(job.work) if job.work else None), Path(job.out)
    if work is not None:
        check_view_path(work, out)           # --out must not be --work under another spelling
    if served:
        check_fit(cfg, job.card)             # before anything is loaded: the GGUF's own header against the card
    bench = verified_bench(job.data, no_verify, say=True)  # as eval and score verify
    check_name("model", cfg.name)
    selection, cases = job.resolve(bench)
    target = work or out
    with transcript_lock(target, wait=work is not None):  # before serving, and while the view is cut
        serving = serve_model(cfg, log_path=Path(server_log) if server_log else None, gpu=require_gpu) if served \
            else nullcontext(None)
        with serving as url:
            summary = run_model(cfg, bench.system(job.system), cases, target, base_url=url, restart=restart,
                                selection=selection, serving=serving_record(cfg, url), set_aside_changed=set_aside,
                                rerun_changed=rerun_changed, progress_interval=progress)
        return _report(summary, out, work, selection, cases)


def _report(summary: RunSummary, out: Path, work: Path | None, selection: Selection, cases: list[Case]) -> int:
    """Print the counts line; a run that failed on its endpoint raises its one error line; else cut the view."""
    print(f"{summary.path}: ran {summary.ran} case{'' if summary.ran == 1 else 's'} ({summary.failed} failed), "
          f"{summary.skipped} already done, {summary.wall_s:.1f} s; endings: {summary.counts()}", flush=True)
    problem = summary.problem()
    if problem is not None:
        raise MetrobenchError(problem)
    if work is not None:
        from metrobench.transcripts.views import cut_view

        count = cut_view(work, out, selection, cases)
        print(f"wrote {out}: {count} of {len(cases)} cases, the {selection.partition} view", flush=True)
    return 0

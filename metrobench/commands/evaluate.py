"""``metrobench eval``: one model on every system of a selection, then scored and summarised, one command.

Contract: for each system (``--system all``, the default, or a comma-separated list) it does what
``metrobench run`` (an endpoint) or ``metrobench bench`` (a model with a ``serving`` block and no
``base_url``: llama-server is started for it) does with ``--work``: the cases run into the model's
one growing transcript of the system, ``<results>/work/<model>/<system>.jsonl``, the transcript
the workflow's run jobs grow too, so a case already there (from an earlier ``eval``, a ``run`` or
the workflow) is never sent again and a stopped ``eval`` resumes where it stopped. The selection's
view of each transcript is cut to ``<results>/eval/<model>/runs/<system>.jsonl``, scored into
``<results>/eval/<model>/scores/`` as ``metrobench score`` scores, and summarised as
``metrobench summary`` does, over this call's systems only, followed by the model's row among the
paper's published Table 2 (:mod:`metrobench.paper.published`): marked "run here" beside the rows
marked "published", with its cases (of the paper's 238 held-out), systems and 95 % intervals where it
is not the paper's held-out set. Last it writes ``<results>/eval/<model>/results.json``, the
eval's results in one file (:mod:`metrobench.commands.eval_results`: its schema and contents). The views and scores stay outside the workflow's ``runs/`` and
``scores/`` folders: a sampled or narrowed ``eval`` never stands in for a workflow output.

``metrobench results`` writes the same file for a model of the workflow, from its views and scores
(rule ``results_file``: ``results/models/<model>/results.json``).

Errors are the run's and the scorer's own one-line errors; the first system whose run fails
stops the command (rerunning it redoes exactly the cases left).

A view and its scores belong to one selection: the views are cut into the eval's own temporary
folder as its systems run, and put into ``runs/``, scored and summarised under the eval folder's
lock (``<results>/eval/.<model>.lock``), so two ``eval``s of one model with different selections
(``--sample 8`` and ``--sample 2`` at once) each score what they cut; the folder then holds the last
one's views of its systems.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from metrobench import layout
from metrobench.atomic import remove_stale_temporaries, sidecar_lock, temporary_for
from metrobench.commands.common import Subparsers, add_case_options, add_data, add_model_options, \
    add_progress_option, add_resume_options, add_verify, ModelFlags, model_config, name_list, verified_bench
from metrobench.errors import MetrobenchError
from metrobench.paper.published import judge_note
from metrobench.vocabulary import REPORT_PARTITIONS, report_partition

ALL = "all"


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("eval", help="a model on every system (or some): run, resumable, then score and summary")
    add_data(p)
    from metrobench.commands.common import system_list  # issue 51: `all` alone, not in a list

    p.add_argument("--system", type=system_list, default=ALL,
                   help="comma-separated systems, or all (default: all six)")
    add_model_options(p)
    add_case_options(p, "the cases each system runs (default: holdout, the summary's and the paper's headline's)")
    p.set_defaults(partition="holdout")
    p.add_argument("--results", default=layout.RESULTS, metavar="DIR",
                   help="results folder: transcripts in DIR/work/, views and scores in DIR/eval/<model>/ "
                        "(default: results)")
    add_resume_options(p)
    add_progress_option(p)
    from metrobench.commands.scoring import add_judge_options

    add_judge_options(p)
    add_verify(p)
    p.add_argument("--server-log", help="file for llama-server's output (a model with a serving block)")
    p.add_argument("--require-gpu", action="store_true",
                   help="as bench --require-gpu: refuse a GPU row on a build that would serve it on the CPU")
    p.set_defaults(func=cmd_eval)
    _add_results(sub)


def _add_results(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("results", help="a workflow model's results.json (eval's file, from the workflow's runs "
                                       "and scores)")
    p.add_argument("--config", action="append", required=True, help="study config file(s), merged in order")
    p.add_argument("--model", required=True, help="the model (a configured model, a repeat or a student seed)")
    p.add_argument("--runs", required=True, metavar="DIR", help="its views: DIR/<model>/<system>.jsonl")
    p.add_argument("--scores", required=True, metavar="DIR", help="their Parquet scores (the config's judge)")
    p.add_argument("--partition", choices=REPORT_PARTITIONS, type=report_partition,
                   help="the headline's partition (default: the config's bench.partition)")
    p.add_argument("--verified", metavar="STAMP", help="verify-data's stamp: the data's digests were checked")
    p.add_argument("--out", required=True, help="the results file (results/models/<model>/results.json)")
    p.set_defaults(func=cmd_results)


def cmd_results(args: argparse.Namespace) -> int:
    from metrobench.atomic import write_text
    from metrobench.commands.common import load_study
    from metrobench.commands.eval_results import dumps, workflow_results

    results = workflow_results(load_study(args.config), args.model, runs=Path(args.runs), scores=Path(args.scores),
                               partition=args.partition, verified=bool(args.verified and Path(args.verified).is_file()))
    write_text(Path(args.out), dumps(results.model_dump(mode="json")))
    print(f"wrote {args.out}")
    return 0


def systems_of(text: str) -> list[str]:
    """``all`` or a comma-separated list of systems, in the benchmark's order, each checked."""
    from metrobench.data.root import SYSTEMS

    if text == ALL:
        return list(SYSTEMS)
    wanted = text.split(",")
    unknown = [s for s in wanted if s not in SYSTEMS]
    if unknown:
        raise MetrobenchError(f"eval: --system: unknown system {unknown[0]!r} (choose from all, {', '.join(SYSTEMS)})")
    return [s for s in SYSTEMS if s in wanted]


def eval_root(model: str, root: str) -> str:
    """The folder of one model's ``eval`` views and scores."""
    return f"{root}/eval/{model}"


def cmd_eval(args: argparse.Namespace) -> int:
    from metrobench.commands.common import load_study
    from metrobench.commands.eval_results import build, judge_of, write_results
    from metrobench.commands.runs import execute, flags_job, run_options
    from metrobench.commands.scoring import score_runs

    systems = systems_of(args.system)
    cfg = model_config(config=args.config, model_file=args.model_config, model=args.model, gguf=args.gguf,
                       repeat=args.repeat, flags=ModelFlags.parsed(args))
    bench = verified_bench(args.data, args.no_verify)
    args.data = str(bench.root)                              # the runs read the benchmark just verified
    folder = eval_root(cfg.name, args.results)
    pending = _pending_folder(Path(folder))
    try:
        for system in systems:
            job = flags_job(args, system=system, out=str(pending / f"{system}.jsonl"),
                            work=layout.work_path(cfg.name, system, args.results))
            execute(job, **run_options(args))
        with _one_at_a_time(Path(folder), cfg.name):
            views = []
            for system in systems:       # this eval's views, cut for its selection, in place only now
                view = Path(folder) / "runs" / f"{system}.jsonl"
                view.parent.mkdir(parents=True, exist_ok=True)
                os.replace(pending / f"{system}.jsonl", view)
                views.append(str(view))
            print(f"views of this eval's selection in {folder}/runs: {', '.join(systems)}", flush=True)
            scores = Path(f"{folder}/scores")
            score_runs(argparse.Namespace(**{**vars(args), "partition": None, "sample": None, "model": None,
                                             "system": None}), bench, views, scores)
            partition = report_partition(args.partition)
            print()
            print(summary(scores, cfg.name, systems, partition))
            print()
            print(ranking(scores, cfg.name, systems, partition, judge_note(args.judge, args.judge_model)))
            results = build(cfg=cfg, views=dict(zip(systems, map(Path, views))), scores=scores,
                            partition=partition, judge=judge_of(args), verified=not args.no_verify,
                            prices=load_study(args.config).prices if args.config else None)
            print(f"wrote {write_results(results, Path(folder))}")
    finally:
        shutil.rmtree(pending, ignore_errors=True)
    return 0


def _pending_folder(folder: Path) -> Path:
    """This eval's own folder for its views while its systems run (``<folder>/.pending.<pid>.tmp``).

    Two ``eval``s of one model with different selections (``--sample 8`` and ``--sample 2``) share
    ``<folder>/runs/``; cut there as each system finished, one's view was scored and summarised as
    the other's. Each eval cuts into its own folder and moves its views into ``runs/`` only under
    :func:`_one_at_a_time`, so what it scores is what it cut. A killed eval's folder is removed."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder, "pending")
    pending = temporary_for(folder / "pending")
    shutil.rmtree(pending, ignore_errors=True)
    pending.mkdir()
    return pending


@contextmanager
def _one_at_a_time(folder: Path, model: str) -> Iterator[None]:
    """Hold the eval folder's lock while its views are put in place, scored and summarised: another
    eval of the model waits, so a view and its scores always belong to one selection."""
    def busy() -> None:
        print(f"{folder}: another eval of {model} is scoring there; waiting for it to finish",
              file=sys.stderr, flush=True)

    with sidecar_lock(folder, busy):
        yield


def summary(scores: Path, model: str, systems: list[str], partition: str) -> str:
    """``metrobench summary``'s text for ``model`` on these ``systems`` only."""
    from metrobench.commands.eval_results import eval_scores
    from metrobench.scoring.summary import summary_text, summarise

    return "\n\n".join(summary_text(s) for s in summarise(eval_scores(scores, model, systems), partition))


def ranking(scores: Path, model: str, systems: list[str], partition: str, judge: str | None = None) -> str:
    """The model's row among the paper's published Table 2, marked "run here", with what it was
    scored on where that is not the paper's held-out set."""
    from metrobench.commands.eval_results import entry
    from metrobench.paper.published import render_among

    return render_among([entry(scores, model, systems, partition, judge)])

"""The scoring stage: ``score`` (runs into Parquet) and ``summary`` (headline numbers from it).

Contract: ``score`` writes ``DIR/model=M/system=S/part.parquet`` per run, cases
absent from a run scoring as failures, and keeps the judge's answers in a cache
beside ``DIR`` unless ``--judge-cache`` names another; ``summary`` only reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.commands.common import Subparsers, add_data, add_selection, add_verify, \
    at_least_one, env_name, http_url, port_number, positive, verified_bench
from metrobench.vocabulary import REPORT_PARTITIONS, report_partition

if TYPE_CHECKING:
    from metrobench.data import Benchmark


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_score, _add_summary, _add_serve_standin):
        add(sub)


def _add_score(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("score", help="score runs into Parquet (DIR/model=M/system=S/part.parquet)")
    add_data(p)
    p.add_argument("--run", required=True, action="append",
                   help="transcript (JSONL) or reference result JSON; repeat for several")
    p.add_argument("--out", required=True, metavar="DIR", help="scores folder")
    add_judge_options(p)
    add_selection(p, "the cases the run should contain (absent ones score as failures); "
                      "default: those the run recorded, else all")
    p.set_defaults(partition=None)
    p.add_argument("--sample", type=at_least_one, help="the run holds only this stratified sample (see run --sample; "
                                              "default: the run's)")
    p.add_argument("--model", help="model name (default: the run's)")
    p.add_argument("--system", help="system (default: the run's)")
    add_verify(p)
    p.set_defaults(func=cmd_score)


def add_judge_options(p: argparse.ArgumentParser) -> None:
    """The judge and errata options of ``score`` (and of ``eval``, which scores the same way)."""
    p.add_argument("--judge", default="none", choices=("none", "anthropic", "openai"))
    p.add_argument("--judge-model", help="judge model (anthropic default: claude-haiku-4-5-20251001)")
    p.add_argument("--judge-url", type=http_url, help="judge API base URL (default: the provider's)")
    p.add_argument("--judge-key-env", type=env_name, help="environment variable holding the judge's API key")
    p.add_argument("--judge-cache", help="judgment cache (default: DIR.judge-cache.jsonl)")
    p.add_argument("--judge-concurrency", type=at_least_one, default=4)
    p.add_argument("--judge-timeout", type=positive, metavar="SECONDS",
                   help="seconds per judge request, sending to the last byte (default: 60 anthropic, 120 openai)")
    p.add_argument("--judge-attempts", type=at_least_one, metavar="N",
                   help="tries per judgment before the run fails (default 6)")
    p.add_argument("--errata", default="", help="comma-separated errata to apply (default: none)")


def cmd_score(args: argparse.Namespace) -> int:
    score_runs(args, verified_bench(args.data, args.no_verify, say=True), list(args.run), Path(args.out))
    return 0


def score_runs(args: argparse.Namespace, bench: Benchmark, runs: list[str], out: Path) -> None:
    """Score ``runs`` into the folder ``out`` with the judge, errata and selection options in ``args``
    (:func:`add_judge_options`, ``--partition``, ``--split``, ``--sample``, ``--model``, ``--system``),
    printing a line per run and the judge's counts."""
    from metrobench.scoring.errata import parse_errata
    from metrobench.scoring.judge import make_judge
    from metrobench.data.partition import load_split
    from metrobench.scoring.runs import score_run_file

    errata = parse_errata(args.errata)
    cache = Path(args.judge_cache) if args.judge_cache else out.with_name(out.name + ".judge-cache.jsonl")
    judge = make_judge(args.judge, model=args.judge_model, base_url=args.judge_url,
                       api_key_env=args.judge_key_env, cache_path=cache,
                       concurrency=args.judge_concurrency, timeout_s=getattr(args, "judge_timeout", None),
                       attempts=getattr(args, "judge_attempts", None))
    partitions = load_split(bench, args.split)
    for run in runs:
        before = judge.unparsed if judge is not None else 0
        scored = score_run_file(bench, run, out, judge=judge, errata=errata,
                                selection=args.partition, partitions=partitions,
                                model=args.model, system=args.system, sample=args.sample)
        note = f", {scored.missing} missing (scored as failures)" if scored.missing else ""
        if judge is not None and judge.unparsed > before:
            note += f", {judge.unparsed - before} judge replies unparseable (scored 1 of 2)"
        print(f"scored {run}: {len(scored.scores)} cases of {scored.system}{note} -> {scored.path}")
    if judge is not None:
        print(f"judge {judge.describe()}: {judge.hits} cached, {judge.misses} new judgments; {judge.unparsed} of "
              f"{judge.judged} replies unparseable (no 'Score: N': scored 1 of 2, as the reference scores them)")


def _add_summary(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("summary", help="per-system and headline Tier 1 / composite from Parquet scores")
    p.add_argument("--scores", required=True, metavar="DIR")
    p.add_argument("--partition", default="holdout", choices=REPORT_PARTITIONS, type=report_partition)
    p.add_argument("--model", action="append", help="only this model (repeatable)")
    p.set_defaults(func=cmd_summary)


def cmd_summary(args: argparse.Namespace) -> int:
    from metrobench.scoring.store import read_scores
    from metrobench.scoring.summary import summary_text, summarise

    table = read_scores(Path(args.scores), models=args.model or None)
    print("\n\n".join(summary_text(s) for s in summarise(table, args.partition)))
    return 0


def _add_serve_standin(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve-standin", help="serve the judge stand-in on 127.0.0.1 (a try-out of --judge openai; "
                                             "its grades are digests, not judgments)")
    p.add_argument("service", choices=("judge",))
    p.add_argument("--port", type=port_number, default=8091, help="port on 127.0.0.1 (0: a free one; default 8091)")
    p.set_defaults(func=cmd_serve_standin)


def cmd_serve_standin(args: argparse.Namespace) -> int:
    """Serve until interrupted; the first line says how to score with it."""
    import threading

    from metrobench.standins.judge import MODEL, JudgeStandin

    with JudgeStandin(args.port) as server:
        print(f"judge stand-in on {server.url}/v1 (grades are digests of the prompt, not judgments): "
              f"metrobench score ... --judge openai --judge-url {server.url}/v1 --judge-model {MODEL}; "
              "Ctrl-C stops it", flush=True)
        threading.Event().wait()
    return 0

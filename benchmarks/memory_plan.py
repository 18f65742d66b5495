"""Training-memory estimate per student size (QLoRA, one GPU), from a model config: the plan in peft/README.md.

    python benchmarks/memory_plan.py                       # the four sizes, assumed configs, both recipes
    python benchmarks/memory_plan.py --config ~/.cache/huggingface/hub/models--Qwen--Qwen3.5-27B/snapshots/<rev>/config.json \
        --seq 7168 --batch 1

The estimate is metrobench.footprint.training's (one implementation: `metrobench plan`
shows the same figure per training job); its docstring says what it adds up. The configs
are assumptions (hidden size, layers, MLP width of the Qwen3.5 family); give the real
config.json once the base is downloaded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from metrobench.footprint.training import ASSUMED, RECIPES, estimate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", help="a model's config.json (else the four assumed sizes)")
    parser.add_argument("--seq", type=int, default=7168)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    if args.config:
        parts = estimate(json.loads(Path(args.config).read_text()), args.seq, args.batch)
        print(json.dumps({k: round(v, 2) for k, v in parts.items()}, indent=2))
        return
    head = ("recipe", "size", "seq x batch", "NF4", "emb+head", "LoRA+Adam", "activ.", "loss tiles", "total",
            "(fp32 logits avoided)")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for recipe, sizes in RECIPES.items():
        for size, (seq, batch) in sizes.items():
            p = estimate(ASSUMED[size], seq, batch)
            cells = [recipe, size, f"{seq} x {batch}"] + [f"{p[k]:.1f} GB" for k in (
                "nf4_weights", "embeddings_head_bf16", "lora_adam", "activations", "loss_tiles", "total",
                "full_fp32_logits_avoided")]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

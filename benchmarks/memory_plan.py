"""Training-memory estimate per student size (QLoRA, one GPU), from a model config: the plan in peft/README.md.

    python benchmarks/memory_plan.py                       # the four sizes, assumed configs, both recipes
    python benchmarks/memory_plan.py --config ~/.cache/huggingface/hub/models--Qwen--Qwen3.5-27B/snapshots/<rev>/config.json \
        --seq 7168 --batch 1

An estimate, not a measurement: the sum of NF4 weights (4 bits + double-quantised
scales, 0.516 byte a parameter), the unquantised embeddings and LM head in bf16
(what ``prepare_quantized`` keeps; peft's fp32 cast would double them), LoRA
r=16 on the seven projections with fp32 weights, gradients and two Adam moments
(16 bytes a parameter), checkpointed activations (one bf16 hidden state per
layer per token, plus one layer recomputed in full), TRL's fused LM head (a
4,096 x 32,768 bf16 tile forward and backward, fp32 statistics per token; the
full ``seq x vocab`` fp32 logits and their gradient are what it avoids, shown
for comparison) and 1.5 GB of CUDA context and allocator slack. The configs
below are assumptions (hidden size, layers, MLP width of the Qwen3.5 family);
give the real config.json once the base is downloaded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GB = 1e9
VOCAB = 248_320
#: Assumed text configs: hidden, layers, MLP width, tied embeddings.
ASSUMED = {
    "2b": {"hidden_size": 2048, "num_hidden_layers": 24, "intermediate_size": 6144, "tie_word_embeddings": True},
    "4b": {"hidden_size": 2560, "num_hidden_layers": 32, "intermediate_size": 9216, "tie_word_embeddings": True},
    "9b": {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 12288, "tie_word_embeddings": False},
    "27b": {"hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 17408, "tie_word_embeddings": False},
}
#: The recipes' (seq, micro-batch): paper (as published) and corrected.
RECIPES = {"paper": {"2b": (4096, 2), "4b": (4096, 2), "9b": (4096, 2), "27b": (2048, 2)},
           "corrected": {s: (7168, 1) for s in ASSUMED}}


def estimate(cfg: dict, seq: int, batch: int, rank: int = 16) -> dict[str, float]:
    cfg = cfg.get("text_config", cfg)
    h, layers, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    vocab = cfg.get("vocab_size", VOCAB)
    # Per layer: attention-like projections ~4 h^2 (q/k/v/o, or the gated-delta in/out), MLP 3 h x inter.
    linear = layers * (4 * h * h + 3 * h * inter)
    lora = layers * rank * (4 * (h + h) + 2 * (h + inter) + (inter + h))
    tokens = seq * batch
    parts = {
        "nf4_weights": linear * 0.516 / GB,
        "embeddings_head_bf16": vocab * h * 2 * (1 if cfg.get("tie_word_embeddings") else 2) / GB,
        "lora_adam": lora * 16 / GB,
        "activations": (tokens * h * 2 * layers + tokens * (4 * inter + 8 * h) * 2) / GB,
        "loss_tiles": (2 * min(tokens, 4096) * 32_768 * 2 + tokens * 7 * 4) / GB,
        "cuda_context": 1.5,
    }
    parts["total"] = sum(parts.values())
    parts["full_fp32_logits_avoided"] = tokens * vocab * 4 * 2 / GB
    parts["fp32_embeddings_avoided"] = parts["embeddings_head_bf16"]
    return parts


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

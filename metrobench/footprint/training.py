"""One QLoRA training job's peak GPU memory per student size and recipe (one GPU).

Contract: :func:`estimate` adds, in GB (10^9 bytes, as ``peft/README.md`` quotes it), NF4
weights (4 bits + double-quantised scales, 0.516 byte a parameter), the unquantised
embeddings and LM head in bf16 (what ``prepare_quantized`` keeps; peft's fp32 cast would
double them), LoRA r=16 on the seven projections with fp32 weights, gradients and two
Adam moments (16 bytes a parameter), checkpointed activations (one bf16 hidden state per
layer per token, plus one layer recomputed in full), TRL's fused LM head (a 4,096 x 32,768
bf16 tile forward and backward, fp32 statistics per token; the full ``seq x vocab`` fp32
logits and their gradient are what it avoids, shown for comparison) and 1.5 GB of CUDA
context and allocator slack. :data:`ASSUMED` holds the Qwen3.5 sizes' text configs
(hidden size, layers, MLP width; assumptions but for 27B's): a downloaded base's own
``config.json`` replaces them (:func:`base_config`). :func:`recipe_estimate` reads a
recipe's sequence length and micro-batch (a student's ``max_length`` cap applied).

An estimate, not a measurement; ``benchmarks/memory_plan.py`` prints it as a table.
:data:`MEASURED_GIB` holds what the GPU kit measured for the same shapes on a GPU
(:func:`measured`); the plan holds a job to the larger of the two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metrobench.footprint import GB

VOCAB = 248_320
#: Assumed text configs: hidden, layers, MLP width, tied embeddings.
ASSUMED: dict[str, dict[str, Any]] = {
    "2b": {"hidden_size": 2048, "num_hidden_layers": 24, "intermediate_size": 6144, "tie_word_embeddings": True},
    "4b": {"hidden_size": 2560, "num_hidden_layers": 32, "intermediate_size": 9216, "tie_word_embeddings": True},
    "9b": {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 12288, "tie_word_embeddings": False},
    "27b": {"hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 17408, "tie_word_embeddings": False},
}
#: The recipes' (seq, micro-batch): paper (as published) and corrected.
RECIPES = {"paper": {"2b": (4096, 2), "4b": (4096, 2), "9b": (4096, 2), "27b": (2048, 2)},
           "corrected": {s: (7168, 1) for s in ASSUMED}}
#: Peak GPU memory in use (GiB: the device's total less its lowest free, CUDA context and paged
#: optimiser included) that ``scripts/gpu-kit/run.sh`` measured per (size, seq, micro-batch):
#: random weights at the real widths, two optimiser steps, the PyTorch gated-delta path, LoRA
#: weights in bf16 (TRL's cast, before ``lora_dtype``), with the LoRA parameters it trained. The
#: estimate above is 7-28 % lower. (27B paper with the LoRA weights cast to fp32: 24.81 GiB.)
MEASURED_GIB = {("2b", 4096, 2): (5.84, 10_911_744), ("4b", 4096, 2): (9.89, 21_233_664),
                ("9b", 4096, 2): (15.32, 29_097_984), ("27b", 2048, 2): (24.77, 79_691_776),
                ("27b", 7168, 1): (29.23, 79_691_776)}
MEASURED_ON = "GPU kit, NVIDIA H200, 2026-12-04 (benchmarks/recorded/gpu-kit-h200-2026-12-04)"
PARTS = ("nf4_weights", "embeddings_head_bf16", "lora_adam", "activations", "loss_tiles", "cuda_context")


def estimate(cfg: dict[str, Any], seq: int, batch: int, rank: int = 16) -> dict[str, float]:
    """The parts (GB) and their ``total``, with what the recipe avoids beside them."""
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
    parts["total"] = sum(parts[k] for k in PARTS)
    parts["full_fp32_logits_avoided"] = tokens * vocab * 4 * 2 / GB
    parts["fp32_embeddings_avoided"] = parts["embeddings_head_bf16"]
    return parts


def size_key(size: str) -> str | None:
    """The assumed config a student size trains: ``27b-corrected`` -> ``27b``; None when none is assumed."""
    key = size.split("-", 1)[0]
    return key if key in ASSUMED else None


def base_config(base: str) -> dict[str, Any] | None:
    """A hub base's config.json from the Hugging Face cache, when downloaded (any snapshot)."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return None
    snapshots = Path(HF_HUB_CACHE) / f"models--{base.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json")) if snapshots.is_dir() else []
    return json.loads(found[-1].read_text()) if found else None


def recipe_estimate(recipe_path: str, max_length: int | None = None) -> dict[str, float] | None:
    """A student recipe's training estimate (GB), or None for a size with no config (tiny, SmolLM2)."""
    from metrobench.training.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    key = size_key(recipe.size)
    cfg = base_config(recipe.base) or (ASSUMED[key] if key else None)
    if cfg is None or not recipe.load_in_4bit:
        return None
    seq = min(recipe.max_length, max_length) if max_length else recipe.max_length
    return estimate(cfg, seq, recipe.batch_size, recipe.lora_r)


def measured(size: str, seq: int, batch: int, lora_dtype: str = "float32", rank: int = 16) -> float | None:
    """The GPU kit's measured peak (GiB) for this shape, or None where it measured none.

    The kit's LoRA weights were bf16; a ``float32`` recipe adds two bytes a LoRA parameter for the
    weight and two for its gradient (the Adam moments were fp32 either way): an upper bound, as
    the kit's own fp32 run at 27B peaked only 0.04 GiB higher.
    """
    key = size_key(size)
    seen = MEASURED_GIB.get((key, seq, batch)) if key else None
    if seen is None or rank != 16:
        return None
    gib, lora = seen
    return gib + (lora * 4 if lora_dtype == "float32" else 0) / 2**30


def recipe_measured(recipe_path: str, max_length: int | None = None) -> float | None:
    """A student recipe's measured peak (GiB, :func:`measured`), or None where none was measured."""
    from metrobench.training.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    if not recipe.load_in_4bit:
        return None
    seq = min(recipe.max_length, max_length) if max_length else recipe.max_length
    return measured(recipe.size, seq, recipe.batch_size, recipe.lora_dtype, recipe.lora_r)

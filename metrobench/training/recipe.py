"""A student's training recipe: base model, LoRA shape, optimiser schedule, what the loss covers.

Two recipes per size ship in ``peft/recipes/``: ``<size>.yaml`` is the paper's
setting as published (loss on the whole text rendered without tool schemas,
the paper's max lengths with the cut examples kept, 10 % validation and the
best checkpoint by ``eval_loss``), ``<size>-corrected.yaml`` the corrected one
(loss on the assistant turns only, tool schemas rendered as inference renders
them, lengths that keep >= 95 % of the traces whole). The paper recipes
render with Qwen3.5's own chat template and their students are served with it
and thinking on (``template: qwen3.5``); the corrected and CPU recipes keep the
project's template. Whatever the recipe, an example with no loss token inside
``max_length`` is never trained. Every shipped recipe trains its LoRA weights in
fp32 (``lora_dtype``, the paper's adapters); the 2B-27B ones train on CUDA or
stop (``cuda_training``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from metrobench.data.loader import CONFIG_MAX_VALUES, read_yaml
from metrobench.errors import MetrobenchError


class Recipe(BaseModel):
    """The paper's QLoRA recipe (App. C) as defaults; a size's YAML changes what differs."""

    model_config = ConfigDict(extra="forbid")

    size: str
    base: str                       # Hugging Face id, local folder, local .gguf, or "tiny-qwen3"
    load_in_4bit: bool = True       # NF4 with double quantisation
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    epochs: float = 3.0
    max_steps: int = -1             # > 0 overrides epochs (demo and tests)
    batch_size: int = 2
    grad_accum: int = 4
    learning_rate: float = 2e-4
    scheduler: str = "cosine"
    warmup_ratio: float = Field(0.05, validate_default=True)   # checked against max_steps below
    max_length: int = 4096
    # What an example cut by max_length before its last assistant turn becomes:
    # "corrected" drops it (it would teach a conversation without its ending);
    # "paper" keeps it cut, as the published runs did, and the cut is reported.
    # Either way an example with no loss token left is never trained.
    truncation: Literal["corrected", "paper"] = "corrected"
    # What the loss covers: "assistant" (the {% generation %} spans: the assistant turns) or
    # "text" (every token, as the paper's runs did: no completion-only masking).
    loss: Literal["assistant", "text"] = "assistant"
    # Whether the training text carries the seven tool schemas in the system turn, as the
    # served prompt does; the paper rendered its traces without them (no tools= argument).
    tool_schemas: bool = True
    # The chat template the traces are rendered with and the student is served with
    # (metrobench/agents/chat_template.py): "metrobench", the project's ChatML tool template
    # (no thinking block, served with thinking off), or "qwen3.5", Qwen3.5's own (its
    # <function=...> call format, <think> blocks, served with thinking on), as the paper did.
    template: Literal["metrobench", "qwen3.5"] = "metrobench"
    # How assistant tool calls enter the training text (metrobench/training/hermes.py):
    # "native", as structured calls the template renders in its own syntax, or "hermes-json",
    # as the reference's prepare_data.py wrote them (the paper recipes): <tool_call> JSON
    # blocks as the assistant's content, its own text and reasoning dropped.
    tool_call_format: Literal["native", "hermes-json"] = "native"
    val_fraction: float = 0.05
    # Evaluate every save_steps and end on the checkpoint with the lowest eval_loss
    # (the paper: load_best_model_at_end, metric_for_best_model="eval_loss").
    keep_best: bool = False
    eval_batch_size: int = 1
    # The dtype of the LoRA A/B weights while training (the optimiser's master weights) and in
    # the saved adapter. "float32" is the paper's: Table 8's adapters (42 / 100 / 150 / 305 MB
    # at 2B / 4B / 9B / 27B) are rank-16 parameters x 4 bytes. TRL casts a 4-bit model's
    # trainable weights to bf16 when it builds the trainer; the trainer casts them back
    # (metrobench.training.train.cast_adapters) before the optimiser exists. "bfloat16"
    # keeps TRL's choice (half the adapter's bytes; small updates are lost in bf16).
    lora_dtype: Literal["float32", "bfloat16"] = "float32"
    # Whether the recipe trains on a CUDA device only: `metrobench train` then stops in one line,
    # before the base is loaded, when torch sees no CUDA device (a CPU-only torch, or a driver
    # older than torch's CUDA needs), instead of training a 2B-27B QLoRA on the host for days.
    # True in the four paper sizes and their corrected variants; false (the default) in the
    # CPU recipes (tiny, SmolLM2). `metrobench train --allow-cpu` (the rehearsal, whose bases
    # are tiny stand-ins) trains such a recipe on the CPU anyway.
    cuda_training: bool = False
    optim_cuda: str = "paged_adamw_32bit"
    optim_cpu: str = "adamw_torch"
    gradient_checkpointing: bool = True
    save_steps: int = 50
    logging_steps: int = 1

    @field_validator("warmup_ratio")
    @classmethod
    def _warmup_leaves_steps(cls, ratio: float, info: ValidationInfo) -> float:
        """Refuse a warmup that takes every step of a ``max_steps`` run.

        transformers warms up for ``ceil(warmup_ratio * steps)`` steps from a learning
        rate of 0 at step 0, so one step with the default 5 % is a step at rate 0: the
        adapter stays zero and the student is its base (the CPU demo's one-step students
        were, 2026-12-03). Warmup must end before the last step.
        """
        steps = info.data.get("max_steps", -1)
        warmup = math.ceil(ratio * steps)
        if steps > 0 and ratio > 0 and warmup >= steps:
            raise ValueError(f"a warmup of {warmup} of {steps} steps leaves no step "
                             "at the full learning rate (the first is at 0); lower it (0 for a step or two)")
        return ratio


def load_recipe(path: Path | str) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such recipe")
    return recipe_from(read_yaml(path, CONFIG_MAX_VALUES) or {}, f"{path}: field ")


def recipe_from(data: dict, where: str) -> Recipe:
    """``data`` validated as a recipe (a file's, or a recipe with caps applied); its first
    problem as one line, ``{where}{field}: {message}``."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise MetrobenchError(f"{where}{'.'.join(map(str, err['loc']))}: {err['msg']}") from None

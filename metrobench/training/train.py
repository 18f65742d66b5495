"""QLoRA training of one student (size x seed) with TRL's SFTTrainer.

The base is loaded in 4-bit NF4 with double quantisation (bitsandbytes; on
CUDA, and on the CPU since bitsandbytes 0.50), LoRA adapters go on the
attention and MLP projections, and the loss covers the assistant turns (the
training chat template marks them with ``{% generation %}`` and renders the
tool schemas exactly as inference does) or, with the recipe's ``loss: text``,
the whole text as the paper's runs did. The recipe's ``template`` picks the
chat template (:mod:`metrobench.agents.chat_template`: the project's, or
Qwen3.5's own for the ``paper`` recipes); each example is rendered and
tokenised here (:func:`encode`) and handed to TRL as token ids with the loss
mask, so the text trained on is exactly what the template renders for the
messages, and the adapter's tokenizer is saved with that template's serving
text, which the merged model and its GGUF carry. Memory: the embeddings and LM head
stay bf16 (:func:`prepare_quantized`), and TRL's fused LM head computes the
loss in tiles of 4,096 tokens x 32,768 vocabulary entries, so the
``(sequence, 248k)`` fp32 logits are never materialised; ``metrobench
train`` sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` unless the
environment sets it. Examples are measured first
(:mod:`metrobench.training.tokens`): one with no loss token inside
``max_length`` is never trained, and one cut before its last assistant turn
is dropped unless the recipe's ``truncation`` is ``paper``; both counts are
printed and recorded. The seed sets the LoRA
initialisation, the data order and the train/validation split.

The LoRA weights train and are saved in the recipe's ``lora_dtype`` (fp32 by
default, as the paper's adapters): TRL casts a 4-bit model's trainable weights
to bf16 when it builds the trainer, and :func:`cast_adapters` casts them back
before the optimiser is made (transformers makes it in ``train()``). A recipe
with ``cuda_training: true`` (the 2B-27B students) stops before anything is
loaded where torch sees no CUDA device (:func:`require_cuda`), unless the
caller allows the CPU (``metrobench train --allow-cpu``: the rehearsal).

Checkpoints go to a work folder beside the adapter; a restarted job resumes
from the newest one. ``train_metrics.json`` beside the adapter records wall
time, steps, final train and validation loss (and the best checkpoint when
the recipe keeps it), the adapter's bytes on disk, dtypes and parameter
count, peak memory, library versions and the seed.

A training whose numbers stop being numbers stops: every training log
(loss, gradient norm, validation loss) is checked as it is written
(:func:`check_finite`, through :func:`finite_guard`), and a NaN or infinite
value ends the run in one line naming the step, the value, the recipe and the
seed, before the checkpoint of that step and before any adapter file. At a
learning rate of 1e12 the tiny Qwen3.5 recipe's gradient norm is NaN from step
3, and transformers' ``logging_nan_inf_filter`` logged the NaN loss as 0.0: the
run ended with exit 0 and an adapter of NaN weights (issue 49, item 4). The
filter is off here, so a non-finite loss is logged, and caught, as what it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from metrobench import layout
from metrobench.atomic import write_text
from metrobench.errors import MetrobenchError
from metrobench.jsonl import iter_lines, read_utf8
from metrobench.training.base import base_folder
from metrobench.agents.chat_template import METROBENCH, chat_template
from metrobench.training.recipe import Recipe
from metrobench.training.tokens import assistant_mask, keep, measure, report


def load_examples(path: Path) -> list[dict[str, Any]]:
    """The training set as ``{"messages", "tools"}`` rows (metadata dropped)."""
    path = Path(path)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such training set")
    rows = []
    for number, item in iter_lines(read_utf8(path), path):
        try:
            rows.append({"messages": item["messages"], "tools": item.get("tools") or []})
        except (KeyError, TypeError, AttributeError) as exc:
            raise MetrobenchError(f"{path}: line {number}: not a training example ({exc})") from None
    if len(rows) < 2:
        raise MetrobenchError(f"{path}: {len(rows)} examples; training needs at least 2")
    return rows


def tokenizer_for(base_dir: Path, template: str = METROBENCH):
    """The base's tokenizer with the training text of the named chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    tokenizer.chat_template = chat_template(template).training
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode(tokenizer, row: dict[str, Any], recipe: Recipe) -> dict[str, list[int]]:
    """One example as TRL trains it: its token ids and, for ``loss: assistant``, the assistant mask."""
    ids, mask = assistant_mask(tokenizer, row if recipe.tool_schemas else {**row, "tools": []})
    return {"input_ids": ids, "assistant_masks": mask} if recipe.loss == "assistant" else {"input_ids": ids}


def trainable(rows: list[dict[str, Any]], tokenizer, recipe: Recipe) -> list[dict[str, Any]]:
    """The rows training uses under ``recipe`` (see :func:`metrobench.training.tokens.keep`), with a printed count.

    The rows come back in the recipe's ``tool_call_format`` (:mod:`metrobench.training.hermes`),
    so :func:`encode` renders what was measured.
    """
    from metrobench.training.hermes import formatted

    rows, discarded = formatted(rows, recipe.tool_call_format)   # the reference's call text (hermes-json)
    measured = [measure(tokenizer, r, tool_schemas=recipe.tool_schemas) for r in rows]
    summary = report(recipe.size, recipe.max_length, recipe.truncation, measured, recipe.loss,
                     tool_call_format=recipe.tool_call_format, discarded=discarded)
    kept = [r for r, m in zip(rows, measured) if keep(m, recipe.max_length, recipe.truncation, recipe.loss)]
    dropped_cut = len(rows) - len(kept) - summary.zero_loss   # the rest of what keep() refused
    print(summary.line())
    print(summary.detail())
    print(f"training on {len(kept)} of {len(rows)} examples: dropped {summary.zero_loss} with no loss token "
          f"and {dropped_cut} cut before their last assistant turn (truncation: {recipe.truncation})", flush=True)
    if len(kept) < 2:
        raise MetrobenchError(f"recipe {recipe.size}: {len(kept)} of {len(rows)} examples left to train at "
                              f"max_length {recipe.max_length}; raise max_length")
    return kept


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for package in ("torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate", "datasets"):
        try:
            out[package] = md.version(package)
        except md.PackageNotFoundError:
            pass
    return out


def _prepare_work(work: Path, recipe: Recipe, dataset: Path, seed: int) -> None:
    """Keep checkpoints only if they belong to this recipe, seed and training set."""
    stamp = json.dumps({"recipe": recipe.model_dump(), "seed": seed,
                        "dataset": hashlib.sha256(Path(dataset).read_bytes()).hexdigest()}, sort_keys=True)
    marker = work / "fingerprint.json"
    if work.exists() and (not marker.is_file() or marker.read_text() != stamp):
        shutil.rmtree(work)  # another recipe's checkpoints: start afresh
    work.mkdir(parents=True, exist_ok=True)
    marker.write_text(stamp)


def _last_checkpoint(work: Path) -> str | None:
    checkpoints = sorted(work.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return str(checkpoints[-1]) if checkpoints else None


def prepare_quantized(model, gradient_checkpointing: bool):
    """``prepare_model_for_kbit_training`` without its fp32 copy of the embeddings and the LM head.

    As peft does: every base weight frozen, the small unquantised ones (norms,
    biases, the gated-delta layers' decay and convolution weights) cast to fp32
    for stable updates, gradient checkpointing on. Unlike peft, the input
    embeddings and the LM head stay in the load dtype (bf16 on CUDA): at 27B
    the two 248k-row matrices are 5 GB in bf16 and 10 GB in fp32, and both are
    frozen, so fp32 buys nothing.
    """
    import torch

    big = {id(p) for module in (model.get_input_embeddings(), model.get_output_embeddings())
           if module is not None for p in module.parameters()}
    for param in model.parameters():
        param.requires_grad = False
        if (param.dtype in (torch.float16, torch.bfloat16) and param.__class__.__name__ != "Params4bit"
                and id(param) not in big):
            param.data = param.data.to(torch.float32)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    return model


def gated_delta_path() -> str:
    """Which gated-delta (Qwen3.5 linear-attention) implementation transformers will pick, in words."""
    import importlib

    found = []
    for package, name in (("fla", "flash-linear-attention"), ("causal_conv1d", "causal-conv1d")):
        try:
            importlib.import_module(package)
            found.append(name)
        except Exception:  # noqa: BLE001 - not installed, or no CUDA build: transformers falls back
            pass
    if not found:
        return "PyTorch reference path (flash-linear-attention and causal-conv1d not installed)"
    return " + ".join(found) + " kernels" + ("" if len(found) == 2 else " (the other part on the PyTorch path)")


def load_model(recipe: Recipe, base_dir: Path, cuda: bool):
    """The base, NF4 on CUDA in bf16 (fp32 on the CPU), prepared for QLoRA (see :func:`prepare_quantized`)."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    dtype = torch.bfloat16 if cuda else torch.float32
    quantization = None
    if recipe.load_in_4bit:
        quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), quantization_config=quantization, dtype=dtype,
                                                 device_map={"": 0} if cuda else None)
    if quantization is not None:
        model = prepare_quantized(model, recipe.gradient_checkpointing)
        if not cuda:
            unpack_cpu_kernels(model)
    if getattr(model.config, "model_type", "").startswith("qwen3_5"):
        print(f"gated-delta layers: {gated_delta_path()}", flush=True)
    return model, quantization is not None


def save_adapter(model: Any, out: Path) -> None:
    """PEFT's ``save_pretrained``, with the config's sets written in sorted order.

    PEFT holds ``target_modules`` (and any other option given as a set) as a Python
    set and writes ``list(set)`` to ``adapter_config.json``: the order follows the
    process's string hashing, so two trainings of the same recipe and seed wrote
    different bytes (found comparing two ``make run``s of the demo; the weights were
    equal). Sorted, the file depends on the recipe only. PEFT reads either order.
    """
    model.save_pretrained(str(out))
    configs = getattr(model, "peft_config", {})
    for name, config in configs.items():
        sets = [key for key, value in vars(config).items() if isinstance(value, set)]
        path = out / ("adapter_config.json" if name == "default" else f"{name}/adapter_config.json")
        if not sets or not path.is_file():
            continue
        saved = json.loads(path.read_text(encoding="utf-8"))
        for key in sets:
            if isinstance(saved.get(key), list):
                saved[key] = sorted(saved[key], key=str)
        write_text(path, json.dumps(saved, indent=2, sort_keys=True))   # PEFT's own layout


def unpack_cpu_kernels(model) -> int:
    """Keep bitsandbytes' packed AVX-512-BF16 kernel off NF4 layers it cannot pack; how many.

    On a CPU with AVX-512 BF16, bitsandbytes repacks an NF4 weight in blocks of 32
    output rows the first time the layer runs in eval mode without gradients (the
    validation pass), and fails its own assertion (``N must be divisible by
    block_n``) where the rows are not a multiple of 32, as in the tiny Qwen3.5's
    gated-delta projections. Those layers take the generic kernel instead, the one
    every other CPU uses; layers that pack keep the fast path.
    """
    changed = 0
    for module in model.modules():
        if getattr(module, "support_avx512bf16_for_cpu", False) and module.out_features % 32:
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def sft_config(recipe: Recipe, work: Path, seed: int, cuda: bool, quantized: bool):
    """TRL's settings for a recipe. TRL's fused LM head computes the loss in tiles, never the full logits.

    No ``assistant_only_loss``: the dataset is already tokenised (:func:`encode`) and its
    ``assistant_masks`` column, present for ``loss: assistant``, gives TRL the labels. No
    ``logging_nan_inf_filter``: transformers' default replaces a NaN or infinite step loss in
    the log by the window's mean of the others (0.0 with one step a window), which hid a
    diverged run (:func:`check_finite` reads the log).
    """
    from trl import SFTConfig

    best = {"eval_strategy": "steps", "eval_steps": recipe.save_steps, "load_best_model_at_end": True,
            "metric_for_best_model": "eval_loss", "greater_is_better": False} if recipe.keep_best else \
        {"eval_strategy": "no"}
    return SFTConfig(
        output_dir=str(work), num_train_epochs=recipe.epochs, max_steps=recipe.max_steps,
        per_device_train_batch_size=recipe.batch_size, per_device_eval_batch_size=recipe.eval_batch_size,
        gradient_accumulation_steps=recipe.grad_accum, learning_rate=recipe.learning_rate,
        lr_scheduler_type=recipe.scheduler, warmup_steps=recipe.warmup_ratio, max_length=recipe.max_length,
        seed=seed, data_seed=seed,
        optim=recipe.optim_cuda if cuda else recipe.optim_cpu, bf16=cuda, use_cpu=not cuda,
        gradient_checkpointing=recipe.gradient_checkpointing and not quantized,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        logging_steps=recipe.logging_steps, logging_nan_inf_filter=False,
        save_strategy="steps", save_steps=recipe.save_steps,
        save_total_limit=2, report_to=[], dataloader_num_workers=0, **best,
    )


#: The NVIDIA driver (Linux x86_64) a torch built for each CUDA release needs: the driver that
#: release's toolkit ships with (NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and
#: Corresponding Driver Versions", each release's GA row). Other releases fall back to their
#: major's floor under CUDA's minor-version compatibility (docs.nvidia.com/deploy/
#: cuda-compatibility/minor-version-compatibility.html: 13.x >= 580, 12.x >= 525, 11.x >= 450).
CUDA_DRIVERS = {"13.0": "580.65.06", "12.8": "570.26", "12.6": "560.28.03", "12.4": "550.54.14"}
CUDA_MAJOR_DRIVERS = {"13": "580", "12": "525", "11": "450"}


def driver_needed(cuda: str) -> str:
    """The Linux driver version a CUDA ``cuda`` (``torch.version.cuda``, e.g. "13.0") build needs, in words."""
    release = ".".join(cuda.split(".")[:2])
    if release in CUDA_DRIVERS:
        return f">= {CUDA_DRIVERS[release]}"
    major = cuda.split(".")[0]
    return f">= {CUDA_MAJOR_DRIVERS[major]}" if major in CUDA_MAJOR_DRIVERS else "that supports it"


def require_cuda(recipe: Recipe) -> None:
    """Refuse, in one line, a ``cuda_training`` recipe where torch sees no CUDA device.

    torch from the index is a CUDA build that needs a recent driver; with an older one
    ``torch.cuda.is_available()`` is false, and training went on, on the host, for a
    27B QLoRA that takes 103 min a seed on an RTX 5090 (issue 38, item 4). The line names
    torch's CUDA and the driver it needs; callers that mean the CPU (the rehearsal, whose
    bases are tiny stand-ins) skip this check (``train(..., allow_cpu=True)``).
    """
    import torch

    if not recipe.cuda_training or torch.cuda.is_available():
        return
    cuda = torch.version.cuda
    if cuda is None:
        why = (f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None): "
               "install a CUDA build of torch")
    else:
        why = (f"torch {torch.__version__} is built for CUDA {cuda}, which needs an NVIDIA driver "
               f"{driver_needed(cuda)} on Linux (nvidia-smi shows the installed driver; "
               "CUDA_VISIBLE_DEVICES must not hide the card)")
    raise MetrobenchError(f"recipe {recipe.size} trains on CUDA (cuda_training: true), but torch sees no "
                          f"CUDA device: {why}; or train on the CPU anyway with `metrobench train --allow-cpu`")


def cast_adapters(model, dtype: str) -> int:
    """Every trainable weight of ``model`` (the LoRA A/B matrices) in ``dtype``; how many tensors changed.

    TRL's SFTTrainer casts the trainable weights of a 4-bit model to bf16 when it is
    built (QLoRA paper's advice; ``trl/trainer/sft_trainer.py``, "When using QLoRA, the
    PEFT adapter weights are converted to bf16"); the paper's adapters are fp32 (Table 8).
    Called after the trainer is built and before its optimiser exists (transformers makes
    it in ``train()``), so the optimiser's master weights and the saved adapter have
    ``dtype``. A model whose trainable weights already have it (the CPU recipes' plain fp32
    LoRA) is left untouched: 0.
    """
    import torch

    target = getattr(torch, dtype)
    changed = 0
    for param in model.parameters():
        if param.requires_grad and param.dtype != target:
            param.data = param.data.to(target)
            changed += 1
    return changed


#: The training log's values that must stay finite, and what each is in words.
WATCHED = {"loss": "training loss", "grad_norm": "gradient norm", "eval_loss": "validation loss"}


def check_finite(logs: dict[str, Any], step: int, recipe: Recipe, seed: int) -> None:
    """Raise, in one line, when a watched value of a training log is NaN or infinite.

    A NaN loss or gradient poisons the LoRA weights at the optimiser step that
    follows, and every later step and the saved adapter with them: a student
    served from it scores near zero as if that were a result. The line names the
    step, the value, the recipe and the seed, and says what to change.
    """
    for key, what in WATCHED.items():
        try:
            value = float(logs[key])
        except (KeyError, TypeError, ValueError):   # not logged this time, or not a number at all
            continue
        if not math.isfinite(value):
            when = f"after step {step}" if key == "eval_loss" else f"at step {step}"
            raise MetrobenchError(
                f"recipe {recipe.size}, seed {seed}: the {what} is {value} {when} (learning_rate "
                f"{recipe.learning_rate:g}); training stopped and no adapter was written: lower the "
                f"learning rate (or find what else diverged) and train again")


def finite_guard(recipe: Recipe, seed: int):
    """A ``TrainerCallback`` that runs :func:`check_finite` on every log the trainer writes.

    ``on_log`` runs before the checkpoint of the same step is saved (transformers logs,
    then evaluates, then saves), so a run stopped here leaves no checkpoint of NaN
    weights in the work folder; a rerun of the same recipe resumes from the last one and
    stops at the same step, a changed recipe starts afresh (:func:`_prepare_work`). It
    also sees the final evaluation's ``eval_loss``.
    """
    from transformers import TrainerCallback

    class FiniteGuard(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            check_finite(logs or {}, state.global_step, recipe, seed)

    return FiniteGuard()


def adapter_summary(model) -> dict[str, Any]:
    """The LoRA weights' dtypes, parameter count and bytes in memory (parameters x element size)."""
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    return {"adapter_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in lora}),
            "adapter_params": sum(p.numel() for p in lora),
            "adapter_tensor_bytes": sum(p.numel() * p.element_size() for p in lora)}


def build_trainer(recipe: Recipe, rows: list[dict[str, Any]], base_dir: Path, tokenizer, work: Path, *,
                  seed: int, callbacks: list | None = None):
    """The SFTTrainer of one run: model, LoRA in the recipe's ``lora_dtype``, the seed's train/validation
    split; nothing trained yet, no optimiser made."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import set_seed
    from trl import SFTTrainer

    cuda = torch.cuda.is_available()
    set_seed(seed)
    # Token ids, not messages: TRL then trains on exactly the rendered text (its labels come
    # from the assistant mask), and no schema or argument object goes through Arrow, which
    # would merge differing keys into one struct padded with nulls that templates render.
    data = Dataset.from_list([encode(tokenizer, r, recipe) for r in rows])
    n_val = max(1, round(recipe.val_fraction * len(rows)))
    split = data.train_test_split(test_size=n_val, seed=seed)
    model, quantized = load_model(recipe, base_dir, cuda)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in recipe.target_modules if t in present]
    if not targets:
        raise MetrobenchError(f"recipe {recipe.size}: none of {recipe.target_modules} in the base model")
    lora = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=sft_config(recipe, work, seed, cuda, quantized),
                         train_dataset=split["train"], eval_dataset=split["test"],
                         processing_class=tokenizer, peft_config=lora, callbacks=callbacks)
    if trainer.optimizer is not None:   # transformers makes it in train(); a cast after would be lost to it
        raise MetrobenchError("the trainer made its optimiser before the LoRA weights were cast to "
                              f"{recipe.lora_dtype}: this transformers/TRL is not supported")
    changed = cast_adapters(trainer.model, recipe.lora_dtype)
    if changed:
        print(f"LoRA weights: {changed} tensors cast back to {recipe.lora_dtype} (lora_dtype) after TRL's cast",
              flush=True)
    return trainer


def train(recipe: Recipe, dataset: Path, out: Path, *, seed: int, work: Path | None = None,
          callbacks: list | None = None, revision: str | None = None, allow_cpu: bool = False) -> dict[str, Any]:
    """Train the adapter into ``out``; returns (and writes) the run's metrics.

    A ``cuda_training`` recipe without a CUDA device stops first (:func:`require_cuda`)
    unless ``allow_cpu``. A non-finite loss, gradient norm or validation loss stops the
    run (:func:`finite_guard`) before anything is written to ``out``.
    """
    import torch

    if not allow_cpu:
        require_cuda(recipe)
    start = time.perf_counter()
    out, work = Path(out), Path(work) if work else Path(out).with_name(Path(out).name + ".work")
    rows = load_examples(dataset)
    _prepare_work(work, recipe, dataset, seed)
    base_dir = base_folder(recipe.base, revision)
    tokenizer = tokenizer_for(base_dir, recipe.template)
    cuda = torch.cuda.is_available()
    measured_rows = len(rows)
    rows = trainable(rows, tokenizer, recipe)
    trainer = build_trainer(recipe, rows, base_dir, tokenizer, work, seed=seed,
                            callbacks=[finite_guard(recipe, seed), *(callbacks or [])])
    resumed = _last_checkpoint(work)
    result = trainer.train(resume_from_checkpoint=resumed)
    evaluation = trainer.evaluate()
    # The guard saw both through the log; checked again here so no adapter is ever written from
    # a run whose final numbers are not numbers, whatever the callbacks.
    check_finite({"loss": result.training_loss, "eval_loss": evaluation.get("eval_loss")},
                 trainer.state.global_step, recipe, seed)

    out.mkdir(parents=True, exist_ok=True)
    save_adapter(trainer.model, out)
    tokenizer.chat_template = chat_template(recipe.template).serving
    tokenizer.save_pretrained(str(out))
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    adapter_bytes = sum(p.stat().st_size for p in out.glob("adapter_model*"))
    peak = (torch.cuda.max_memory_allocated() if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    metrics = {
        "size": recipe.size, "seed": seed, "base": recipe.base, "examples": len(rows),
        "examples_dropped": measured_rows - len(rows),
        "train_examples": len(trainer.train_dataset), "val_examples": len(trainer.eval_dataset),
        "steps": trainer.state.global_step, "epochs": trainer.state.epoch,
        "first_train_loss": losses[0] if losses else None,
        "final_train_loss": losses[-1] if losses else None,
        "mean_train_loss": result.training_loss, "val_loss": evaluation.get("eval_loss"),
        "best_checkpoint": trainer.state.best_model_checkpoint, "best_val_loss": trainer.state.best_metric,
        "adapter_bytes": adapter_bytes, **adapter_summary(trainer.model), "peak_memory_bytes": peak,
        "device": "cuda" if cuda else "cpu", "resumed_from": resumed,
        "wall_s": round(time.perf_counter() - start, 1), "versions": _versions(),
        "recipe": recipe.model_dump(),
        "chat_template_sha256": hashlib.sha256(chat_template(recipe.template).serving.encode()).hexdigest(),
    }
    write_text(out / layout.TRAIN_METRICS, json.dumps(metrics, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return metrics

"""Peak memory of one student's QLoRA training at the real Qwen3.5 widths, from random weights.

    python benchmarks/real_width_qlora.py --size 27b --recipe peft/recipes/27b.yaml --out OUT/27b.json
    python benchmarks/real_width_qlora.py --size 27b --recipe peft/recipes/27b.yaml --lora-dtype other ...
    python benchmarks/real_width_qlora.py --layer --size 27b --seq 2048 --batch 2 --out OUT/layer.json
    python benchmarks/real_width_qlora.py --cpu ...       # the same code at a tiny width on the CPU

QLoRA memory depends on shapes, dtypes, sequence length and batch, not on weight
values, so a random model with a size's real text configuration
(``scripts/gpu-kit/configs/qwen3_5-<size>.json``) measures what the real base would,
without the base: nothing is downloaded and no tokenizer travels.

The training is the project's own, not a copy: :func:`metrobench.training.train.build_trainer`
builds the trainer from the recipe (its ``load_model`` makes the recipe's
``BitsAndBytesConfig``, NF4 with double quantisation and bf16 compute, and runs
``prepare_quantized``; its ``sft_config`` sets the optimiser, precision and
checkpointing; whatever it does to the LoRA weights, it does here too). Two
things are supplied, both at the boundary where ``metrobench train`` reads files:

* the weights: while the trainer is built, ``AutoModelForCausalLM.from_pretrained``
  returns the real-width ``Qwen3_5ForCausalLM`` made on the meta device, converted
  by transformers' own bitsandbytes quantizer for the config ``load_model`` passed,
  its linear layers NF4-quantised from random bf16 made on the device one at a
  time, the rest random in the load dtype, tied as the config says;
* the text: a tokenizer built in memory whose chat template yields synthetic
  token ids of exactly the recipe's ``max_length`` (a quarter of them prompt, the
  rest assistant turns for ``loss: assistant`` recipes), so every micro-batch is
  full-length.

The run is the recipe with ``max_steps: 2`` (and ``grad_accum`` from ``--grad-accum``,
default 1: accumulation repeats micro-batches, the peak is the same). Recorded:
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` during training,
the lowest free device memory seen by ``torch.cuda.mem_get_info`` (sampled by a
thread every 20 ms and at each step's end; it sees the CUDA context and the paged
optimiser, which the allocator does not), seconds a step, the adapter's dtypes,
the gated-delta path (``train.gated_delta_path()``, and the calls counted into
flash-linear-attention's chunk kernel). ``--gated-delta torch`` hides the fast
kernels so PyTorch's path runs. One process per size and recipe: peaks do not mix.

``--layer`` times one gated-delta layer forward and backward instead (plain bf16
weights: the recurrence is what differs between the paths).
``--cpu`` runs the same code on the CPU at a tiny width (4 layers, hidden 64,
vocabulary 512) and ``--cpu-length`` tokens, with bitsandbytes' CPU 4-bit backend.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.abc
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "scripts" / "gpu-kit" / "configs"
FAST_KERNELS = ("fla", "causal_conv1d")
#: The CPU rehearsal's width: every kind of layer and projection of the real one, tiny.
TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"], "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [2, 1, 1]}}
PAD, EOS = 0, 1
FLA_CALLS = {"chunk": 0}


# ---------------------------------------------------------------- configuration

def text_config(size: str, cpu: bool, config_path: Path | None = None) -> dict[str, Any]:
    """The size's text config (the kit's JSON, or a model's config.json), tiny on the CPU."""
    path = config_path or CONFIGS / f"qwen3_5-{size}.json"
    if not path.is_file():
        raise SystemExit(f"real_width_qlora: error: {path}: no such config (sizes: "
                         f"{', '.join(sorted(p.stem.split('-')[-1] for p in CONFIGS.glob('*.json')))})")
    data = json.loads(path.read_text(encoding="utf-8"))
    config = dict(data.get("text_config", data))
    for key in ("model_type", "architectures", "dtype", "torch_dtype"):
        config.pop(key, None)
    if cpu:
        config.update(TINY, tie_word_embeddings=config.get("tie_word_embeddings", False))
    config.update(pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None)
    return config


def shape_of(config: dict[str, Any]) -> dict[str, Any]:
    """The widths a reader checks, for the record."""
    keys = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "vocab_size", "tie_word_embeddings")
    out = {k: config.get(k) for k in keys}
    out["full_attention_layers"] = list(config.get("layer_types") or []).count("full_attention")
    return out


# ---------------------------------------------------------------- gated-delta kernels

class _HideFastKernels(importlib.abc.MetaPathFinder):
    """Makes flash-linear-attention and causal-conv1d unimportable, so transformers takes PyTorch's path."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - the finder protocol
        if name.split(".")[0] in FAST_KERNELS:
            raise ImportError(f"{name}: hidden by real_width_qlora --gated-delta torch")
        return None


def choose_gated_delta(path: str) -> None:
    """Before transformers is imported: hide the fast kernels (``torch``), or count calls into fla's."""
    if path == "torch":
        sys.meta_path.insert(0, _HideFastKernels())
        return
    try:
        import fla
        import fla.ops.gated_delta_rule as rule
    except Exception:  # noqa: BLE001 - not installed, or no GPU build: transformers falls back
        return
    original = rule.chunk_gated_delta_rule

    @functools.wraps(original)
    def counted(*args, **kwargs):
        FLA_CALLS["chunk"] += 1
        return original(*args, **kwargs)

    for module in (fla, rule, sys.modules.get("fla.ops")):
        if module is not None and getattr(module, "chunk_gated_delta_rule", None) is original:
            module.chunk_gated_delta_rule = counted


# ---------------------------------------------------------------- synthetic text

def synthetic_tokenizer(length: int, vocab: int, seed: int):
    """A tokenizer built in memory whose chat template gives ``length`` synthetic ids per example.

    The example's number (in its first message) seeds the ids, so the data is the same
    every run; ids 0 and 1 (padding, end of sequence) never occur inside a text.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    class SyntheticIds(PreTrainedTokenizerFast):
        def apply_chat_template(self, conversation, tools=None, tokenize=True, return_dict=False,
                                return_assistant_tokens_mask=False, **kwargs):  # noqa: ANN001, ARG002
            number = int(str(conversation[0]["content"]).rsplit(" ", 1)[-1])
            draw = random.Random(seed * 1_000_003 + number)
            ids = [draw.randrange(2, vocab) for _ in range(length)]
            prompt = length // 4
            out = {"input_ids": ids, "assistant_masks": [0] * prompt + [1] * (length - prompt)}
            return out if return_dict else ids

    model = WordLevel({"<pad>": PAD, "<eos>": EOS, "<unk>": 2}, unk_token="<unk>")
    tokenizer = SyntheticIds(tokenizer_object=Tokenizer(model), pad_token="<pad>", eos_token="<eos>",
                             unk_token="<unk>")
    tokenizer.chat_template = "synthetic token ids (benchmarks/real_width_qlora.py)"
    return tokenizer


def synthetic_rows(count: int) -> list[dict[str, Any]]:
    """``count`` training rows; only their numbers matter to :func:`synthetic_tokenizer`."""
    return [{"messages": [{"role": "user", "content": f"synthetic example {i}"},
                          {"role": "assistant", "content": "synthetic"}], "tools": []} for i in range(count)]


# ---------------------------------------------------------------- the random base

def random_base(config: dict[str, Any], quantization_config, dtype, device):
    """The real-width model, quantised as ``from_pretrained`` would, from random weights made on ``device``."""
    import bitsandbytes as bnb
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(**config)
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    quantizer = None
    if quantization_config is not None:
        from transformers.quantizers import AutoHfQuantizer

        quantizer = AutoHfQuantizer.from_config(quantization_config, pre_quantized=False)
        quantizer.preprocess_model(model=model, device_map={"": device}, dtype=dtype)
    keep_fp32 = [*(getattr(model, "_keep_in_fp32_modules", None) or []),
                 *(getattr(model, "_keep_in_fp32_modules_strict", None) or [])]
    tied = bool(cfg.tie_word_embeddings)
    for name, module in model.named_modules():
        if tied and name == "lm_head":
            continue                                   # tied below to the embeddings
        if isinstance(module, bnb.nn.Linear4bit):
            meta = module.weight
            weight = torch.empty(meta.shape, dtype=dtype, device=device).normal_(0.0, 0.02)
            packed = bnb.nn.Params4bit(weight, requires_grad=False, quant_type=meta.quant_type,
                                       blocksize=meta.blocksize, compress_statistics=meta.compress_statistics,
                                       quant_storage=meta.quant_storage, module=module)
            module.weight = packed.to(device)          # quantised here, on the device
            del weight, packed
            if module.bias is not None and module.bias.is_meta:
                module.bias = torch.nn.Parameter(torch.zeros(module.bias.shape, dtype=dtype, device=device))
            continue
        for pname, param in list(module.named_parameters(recurse=False)):
            if param.is_meta:
                kind = torch.float32 if any(k in name for k in keep_fp32) else dtype
                fresh = torch.empty(param.shape, dtype=kind, device=device)
                fresh.normal_(0.0, 0.02) if fresh.dim() > 1 else fresh.zero_()
                setattr(module, pname, torch.nn.Parameter(fresh, requires_grad=param.requires_grad))
        if any(b.is_meta for b in module.buffers(recurse=False)):   # rotary tables: made again on the device
            with torch.device(device):
                fresh_module = type(module)(cfg)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, fresh_module)
    for name, module in model.named_modules():             # the gated-delta decay and step: their own init
        if hasattr(module, "A_log") and hasattr(module, "dt_bias"):
            with torch.no_grad():
                module.A_log.copy_(torch.empty_like(module.A_log, dtype=torch.float32).uniform_(1, 16).log_())
                module.dt_bias.fill_(1.0)
    if tied:
        model.tie_weights()
        if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
            model.lm_head.weight = model.get_input_embeddings().weight
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"random_base: still on the meta device: {left[:5]}")
    if quantizer is not None:
        quantizer.postprocess_model(model)
        model.hf_quantizer = quantizer
    if device.type != "cpu":
        model.hf_device_map = {"": device.index or 0}     # as from_pretrained(device_map={"": 0}) leaves it
    model.config.dtype = dtype
    return model.eval()


@contextlib.contextmanager
def random_weights(config: dict[str, Any], base_dir: Path, built: dict[str, Any]):
    """While open, ``AutoModelForCausalLM.from_pretrained(base_dir, ...)`` returns :func:`random_base`."""
    import torch
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.__dict__["from_pretrained"]

    def from_pretrained(path, *args, quantization_config=None, dtype=None, device_map=None, **kwargs):
        if Path(path) != base_dir or args:
            raise RuntimeError(f"real_width_qlora: unexpected from_pretrained({path!r}, {args}, {kwargs})")
        device = device_map.get("", "cpu") if isinstance(device_map, dict) else "cpu"
        device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
        start = time.perf_counter()
        torch.manual_seed(built.get("seed", 0))
        model = random_base(config, quantization_config, dtype or torch.float32, device)
        built.update(seconds=round(time.perf_counter() - start, 2), dtype=str(dtype).removeprefix("torch."),
                     quantization=quantization_config.to_dict() if quantization_config is not None else None,
                     device=str(device))
        if device.type == "cuda":
            built["allocated_bytes"] = torch.cuda.memory_allocated(device)
        return model

    AutoModelForCausalLM.from_pretrained = from_pretrained
    try:
        yield
    finally:
        AutoModelForCausalLM.from_pretrained = original


# ---------------------------------------------------------------- memory and time

class MemoryWatch:
    """Lowest free device memory (``mem_get_info``), from a thread and from each step's end."""

    def __init__(self, cuda: bool, interval: float = 0.02):
        self.cuda, self.interval = cuda, interval
        self.min_free: int | None = None
        self.total: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        if not self.cuda:
            return
        import torch

        free, total = torch.cuda.mem_get_info(0)
        self.total = total
        self.min_free = free if self.min_free is None else min(self.min_free, free)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        self.sample()
        if self.cuda:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample()


def step_callback(watch: MemoryWatch, cuda: bool, times: list[float], seen: dict[str, Any]):
    """A TrainerCallback timing each optimiser step, sampling free memory at its end, and noting
    the LoRA weights' dtypes as the first step begins (what the optimiser trains)."""
    import torch
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ARG002
            if model is not None and "first_step" not in seen:
                seen["first_step"] = adapter_dtypes(model)
            if cuda:
                torch.cuda.synchronize()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ARG002
            if cuda:
                torch.cuda.synchronize()
            times.append(round(time.perf_counter() - self.start, 3))
            watch.sample()

        on_substep_end = lambda self, *a, **k: watch.sample()  # noqa: E731 - each micro-batch too

    return Steps()


def ran() -> str:
    """Which gated-delta recurrence ran, from the calls counted into flash-linear-attention's kernel."""
    calls = FLA_CALLS["chunk"]
    return f"flash-linear-attention ({calls} kernel calls)" if calls else "PyTorch chunk loop"


def adapter_dtypes(model) -> list[str]:
    return sorted({str(p.dtype).removeprefix("torch.") for n, p in model.named_parameters() if "lora_" in n})


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / 2**30, 3)


# ---------------------------------------------------------------- the measurements

def recipe_for(path: Path, args: argparse.Namespace, length: int):
    """The recipe as ``metrobench train`` reads it, run for two steps (and the lora dtype asked for)."""
    from metrobench.training.recipe import Recipe, load_recipe, recipe_from

    recipe = load_recipe(path)
    data = {**recipe.model_dump(), "max_steps": 2, "grad_accum": args.grad_accum, "max_length": length}
    wanted = None
    if args.lora_dtype and "lora_dtype" in Recipe.model_fields:
        field = Recipe.model_fields["lora_dtype"]
        default, choices = str(field.default), [str(c) for c in typing.get_args(field.annotation)]
        others = [c for c in choices if c != default]
        wanted = args.lora_dtype
        if wanted == "other":
            wanted = others[0] if len(others) == 1 else ("bfloat16" if "32" in default else "float32")
        data["lora_dtype"] = wanted
    return recipe_from(data, f"{path} (two steps): field "), wanted


def qlora(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from metrobench.training import train

    cuda = torch.cuda.is_available() and not args.cpu
    config = text_config(args.size, args.cpu, args.config)
    from metrobench.training.recipe import load_recipe

    probe = load_recipe(args.recipe)
    length = args.cpu_length if args.cpu else probe.max_length
    recipe, wanted = recipe_for(args.recipe, args, length)
    rows = synthetic_rows(max(8, 4 * recipe.batch_size * recipe.grad_accum))
    tokenizer = synthetic_tokenizer(length, config["vocab_size"], args.seed)
    built: dict[str, Any] = {"seed": args.seed}
    times: list[float] = []
    seen: dict[str, Any] = {}
    record: dict[str, Any] = {
        "kind": "qlora", "size": args.size, "recipe": str(args.recipe), "recipe_max_length": probe.max_length,
        "seq": length, "batch": recipe.batch_size, "grad_accum": recipe.grad_accum, "steps_asked": 2,
        "width": "tiny (CPU rehearsal)" if args.cpu else "real", "shape": shape_of(config),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "gated_delta_asked": args.gated_delta,
    }
    with tempfile.TemporaryDirectory(prefix="real-width-") as tmp:
        base_dir, work = Path(tmp) / "random-base", Path(tmp) / "work"
        base_dir.mkdir()
        (base_dir / "config.json").write_text(json.dumps(config, indent=2))
        with MemoryWatch(cuda) as watch:
            with random_weights(config, base_dir, built):
                trainer = train.build_trainer(recipe, rows, base_dir, tokenizer, work, seed=args.seed,
                                              callbacks=[step_callback(watch, cuda, times, seen)])
            record["adapter_dtypes_built"] = adapter_dtypes(trainer.model)
            record["lora_dtype"] = {"asked": args.lora_dtype, "recipe_key": wanted}
            if args.lora_dtype and wanted is None:
                # The recipe schema has no lora_dtype key yet: cast here, and say so.
                target = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(args.lora_dtype)
                if args.lora_dtype == "other":
                    target = torch.float32 if record["adapter_dtypes_built"] == ["bfloat16"] else torch.bfloat16
                for name, param in trainer.model.named_parameters():
                    if "lora_" in name and param.requires_grad:
                        param.data = param.data.to(target)
                record["lora_dtype"]["cast_by"] = "real_width_qlora (the recipe schema has no lora_dtype key)"
            if cuda:
                torch.cuda.synchronize()
                record["build_max_allocated_gib"] = _gib(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            result = trainer.train()
            wall = time.perf_counter() - start
        record.update(
            model_build=built, adapter_dtypes_first_step=seen.get("first_step"),
            adapter_dtypes=adapter_dtypes(trainer.model),
            steps=trainer.state.global_step, step_seconds=times, train_seconds=round(wall, 2),
            losses=[e["loss"] for e in trainer.state.log_history if "loss" in e],
            mean_train_loss=result.training_loss,
            gated_delta_path=train.gated_delta_path(), fla_chunk_calls=FLA_CALLS["chunk"],
            gated_delta_ran=ran(), trainable_parameters=sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
            optimizer=trainer.args.optim, bf16=trainer.args.bf16,
        )
        if cuda:
            record["memory"] = {
                "max_allocated_gib": _gib(torch.cuda.max_memory_allocated()),
                "max_reserved_gib": _gib(torch.cuda.max_memory_reserved()),
                "model_allocated_gib": _gib(built.get("allocated_bytes")),
                "min_free_gib": _gib(watch.min_free), "total_gib": _gib(watch.total),
                "peak_in_use_gib": _gib(watch.total - watch.min_free) if watch.min_free is not None else None,
            }
        else:
            record["memory"] = {"max_rss_gib": _gib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)}
        record["versions"] = train._versions()
    return record


def layer(args: argparse.Namespace) -> dict[str, Any]:
    """One gated-delta layer forward and backward at (batch, seq): seconds and peak memory."""
    import torch
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from metrobench.training.train import gated_delta_path

    cuda = torch.cuda.is_available() and not args.cpu
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    config = text_config(args.size, args.cpu, args.config)
    cfg = Qwen3_5TextConfig(**config)
    index = cfg.layer_types.index("linear_attention")
    torch.manual_seed(args.seed)
    with torch.device(device):
        block = qwen.Qwen3_5GatedDeltaNet(cfg, layer_idx=index).to(dtype)
    seq = args.cpu_length if args.cpu else args.seq
    x = torch.randn(args.batch, seq, cfg.hidden_size, device=device, dtype=dtype, requires_grad=True)

    def once() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = block(x)
        out = out[0] if isinstance(out, tuple) else out
        out.float().square().mean().backward()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = once()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    runs = [once() for _ in range(args.repeats)]
    return {"kind": "layer", "size": args.size, "seq": seq, "batch": args.batch, "dtype": str(dtype),
            "width": "tiny (CPU rehearsal)" if args.cpu else "real", "shape": shape_of(config),
            "device": torch.cuda.get_device_name(0) if cuda else "cpu", "gated_delta_asked": args.gated_delta,
            "gated_delta_path": gated_delta_path(), "fla_chunk_calls": FLA_CALLS["chunk"],
            "gated_delta_ran": ran(), "first_seconds": round(first, 4), "seconds": [round(r, 4) for r in runs],
            "mean_seconds": round(sum(runs) / len(runs), 4),
            "max_allocated_gib": _gib(torch.cuda.max_memory_allocated()) if cuda else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", required=True, help="2b, 4b, 9b or 27b (scripts/gpu-kit/configs)")
    parser.add_argument("--config", type=Path, help="a config.json to use instead of the kit's")
    parser.add_argument("--recipe", type=Path, help="the recipe YAML (peft/recipes/...)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record")
    parser.add_argument("--layer", action="store_true", help="time one gated-delta layer instead of training")
    parser.add_argument("--seq", type=int, default=2048, help="--layer: sequence length")
    parser.add_argument("--batch", type=int, default=2, help="--layer: batch")
    parser.add_argument("--repeats", type=int, default=3, help="--layer: timed runs after a warm-up")
    parser.add_argument("--gated-delta", choices=("auto", "torch"), default="auto",
                        help="torch: hide flash-linear-attention and causal-conv1d (PyTorch's path)")
    parser.add_argument("--lora-dtype", choices=("float32", "bfloat16", "other"),
                        help="the LoRA weights' dtype; other: the one the recipe's default is not")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches a step (the peak is the same)")
    parser.add_argument("--cpu", action="store_true", help="tiny width on the CPU (the rehearsal)")
    parser.add_argument("--cpu-length", type=int, default=64, help="--cpu: tokens an example")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if not args.layer and args.recipe is None:
        parser.error("--recipe is needed unless --layer")
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    choose_gated_delta(args.gated_delta)
    start = time.perf_counter()
    record = layer(args) if args.layer else qlora(args)
    record["process_seconds"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: record.get(k) for k in ("kind", "size", "seq", "batch", "memory", "mean_seconds",
                                                  "step_seconds", "adapter_dtypes", "gated_delta_path")}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

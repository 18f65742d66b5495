"""Peak RSS of the streaming merge against model depth, at Qwen3.5-27B's widths (and PEFT's merge beside it).

Builds random-weight bf16 checkpoints with Qwen3.5-27B's text shapes (hidden
5,120, MLP 17,408, vocabulary 248,320 with an untied LM head, gated-delta layers
with 16 key / 48 value heads of 128, one full-attention layer in four with 24
query heads of 256 (output gate) and 4 KV heads; the values of the released
config.json) and 1, 2, 4, 8 layers, one safetensors shard per layer plus one for
the embeddings and one for the LM head and norm (about 0.75, 2.5 and 2.5 GB: the
hub's shards are ~5 GB; shard size does not enter the streaming merge's peak,
which holds one tensor at a time, so smaller shards keep the disk use down). A
random fp32 adapter of the paper recipe's LoRA (r 16, alpha 32) on every
projection PEFT finds (q/k/v/o of the full-attention layers, gate/up/down of every
layer) goes beside it. Each merge runs in a fresh child process, which reports
its own peak RSS (``VmHWM``): :func:`metrobench.training.export.merge` (streaming) at
every depth, and the old path (transformers loads the whole bf16 model, PEFT's
``merge_and_unload``, ``save_pretrained``) at the smallest depths. One folder grows
from depth to depth (only new layers are written); each merge is deleted once measured
and the folder at the end (peak disk: the 8-layer base and its merge, ~22 GB).

    .venv/bin/python benchmarks/merge_memory.py [--layers 1 2 4 8] [--peft-layers 1 2] [--dir /tmp]

Recorded on the 2-core development machine (23 GB RAM, load average ~9 from other
test suites running beside it), 2026-12-02, 817 s in all; seconds are the streaming merge's:

    layers  base GB  streaming peak RSS  PEFT merge peak RSS
    1       5.9      1.68 GB (146 s)     6.35 GB
    2       6.6      1.69 GB (97 s)      7.12 GB
    4       8.1      1.70 GB (76 s)      -
    8       11.2     1.74 GB (77 s)      -

The streaming peak does not follow the model's size: it is the largest adapted
tensor (an MLP matrix, 17,408 x 5,120: 178 MB in bf16) with its fp32 delta, and
the interpreter with torch and transformers imported (0.4 GB); the embeddings
and LM head (2.5 GB each) are copied in 64 MB pieces. What grows, ~8 MB a layer,
is the fp32 adapter, held whole (4.3 MB of LoRA a layer) and the headers: at 64
layers (the real 27B) that is ~2.2 GB, far under the 8 GB goal. PEFT's merge
grows with the model (0.77 GB for one more layer here, like its bf16 size):
~55 GB at 64 layers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Qwen3.5-27B's text config (the released config.json), depth set per run.
TEXT_CONFIG = {
    "model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 5120,
    "intermediate_size": 17408, "vocab_size": 248320, "num_attention_heads": 24, "num_key_value_heads": 4,
    "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "tie_word_embeddings": False,
    "attn_output_gate": True, "max_position_embeddings": 262144, "dtype": "bfloat16",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
}
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK, ALPHA = 16, 32

#: A merge in a fresh process, which prints its own VmHWM: ``ru_maxrss`` would not do, since
#: Linux carries the forking parent's high-water mark into the child across exec.
_CHILD = """\
import re, sys, time
from pathlib import Path
start = time.perf_counter()
if sys.argv[1] == "streaming":
    from metrobench.training.export import merge_adapter
    merge_adapter(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
else:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.bfloat16)
    PeftModel.from_pretrained(model, sys.argv[3]).merge_and_unload().save_pretrained(sys.argv[4])
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)
print(int(hwm) * 1024, time.perf_counter() - start)
"""


def config_for(layers: int) -> dict:
    types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
    return {**TEXT_CONFIG, "num_hidden_layers": layers, "layer_types": types}


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape of the model, from transformers' own module on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen3_5TextConfig(**config), dtype=torch.bfloat16)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def filled(shape: tuple[int, ...], block):
    """A bf16 tensor of ``shape`` tiled from a random block (random weights without drawing billions)."""
    import torch

    out = torch.empty(shape, dtype=torch.bfloat16)
    flat = out.view(-1)
    for first in range(0, flat.numel(), block.numel()):
        part = flat[first:first + block.numel()]
        part.copy_(block[:part.numel()])
    return out


def write_base(folder: Path, config: dict) -> None:
    """The random checkpoint: one shard per layer, one for the embeddings, one for the head and norm.

    Shards already in ``folder`` are kept: the models of increasing depth grow one
    folder, so each depth writes only its new layers.
    """
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    block = (torch.randn(2**24) * 0.02).to(torch.bfloat16)
    all_shapes, weight_map = shapes(config), {}
    for name, shape in all_shapes.items():
        key = f"layer-{int(name.split('.')[2]):03d}" if name.startswith("model.layers.") else (
            "embed" if "embed_tokens" in name else "head")
        weight_map[name] = f"model-{key}.safetensors"
    for shard in sorted(set(weight_map.values())):
        if not (folder / shard).is_file():
            tensors = {n: filled(all_shapes[n], block) for n, f in weight_map.items() if f == shard}
            save_file(tensors, folder / shard, metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config))


def write_adapter(folder: Path, base_shapes: dict[str, tuple[int, ...]]) -> None:
    """A random fp32 LoRA adapter (r 16, alpha 32) on every projection of the model, with a tokenizer."""
    import torch
    from safetensors.torch import save_file

    from metrobench.training.base import _smollm2_tokenizer

    torch.manual_seed(1)
    tensors = {}
    for name, shape in base_shapes.items():
        module = name[:-len(".weight")]
        if name.endswith(".weight") and module.rsplit(".", 1)[-1] in TARGETS:
            out_features, in_features = shape
            tensors[f"base_model.model.{module}.lora_A.weight"] = torch.randn(RANK, in_features) * 0.01
            tensors[f"base_model.model.{module}.lora_B.weight"] = torch.randn(out_features, RANK) * 0.01
    folder.mkdir(parents=True)
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0,
        "target_modules": list(TARGETS), "bias": "none", "fan_in_fan_out": False}))
    _smollm2_tokenizer().save_pretrained(folder)


def measure(kind: str, base: Path, adapter: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in GB, seconds) of one merge in a fresh process; its output deleted."""
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, str(base), str(adapter), str(out)],
                          capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind} merge failed:\n{done.stderr[-2000:]}")
    peak, seconds = done.stdout.split()[-2:]
    return int(peak) / 1e9, float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--peft-layers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--dir", default=None, help="where the temporary models go (default: the system's)")
    args = parser.parse_args()
    start = time.perf_counter()
    print("layers  base GB  streaming peak RSS  PEFT merge peak RSS", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        for layers in sorted(args.layers):
            config = config_for(layers)
            write_base(base, config)
            adapter = Path(tmp) / f"adapter-{layers}"
            write_adapter(adapter, shapes(config))
            size = sum(p.stat().st_size for p in base.iterdir()) / 1e9
            stream, seconds = measure("streaming", base, adapter, Path(tmp) / "merged")
            peft = (f"{measure('peft', base, adapter, Path(tmp) / 'merged')[0]:.2f} GB"
                    if layers in args.peft_layers else "-")
            print(f"{layers:<7} {size:<8.1f} {stream:.2f} GB ({seconds:.0f} s){'':<6} {peft}", flush=True)
            shutil.rmtree(adapter)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

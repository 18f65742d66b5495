"""Random-weight Qwen3.5 GGUFs at any widths, made by the project's own chain (safetensors -> GGUF -> quantised).

What a llama-server needs in memory and how fast it runs depend on shapes, the
quantisation, the context and the batch, not on the weights' values; so a GGUF of
random weights at a served size's real widths measures what the real file would
(``scripts/gpu-kit/serve.sh``). The file is made the way the study makes its
students' files, not by a writer of its own:

* :func:`random_folder` writes a Hugging Face folder: ``config.json`` for transformers'
  own ``Qwen3_5ForCausalLM`` (or ``Qwen3_5MoeForCausalLM`` when the config names
  experts), the tensors that class declares (names and shapes read from it built on
  the meta device, so nothing the size of the model is ever held in memory) in
  bfloat16 safetensors shards of at most :data:`SHARD_BYTES`, and a tokenizer (see
  :data:`TOKENIZER_BY_TYPE` for the MoE's config.json). The
  values are slices of one pool of normal(0, 0.02) numbers (a 1-D norm weight of the
  gated-delta layers is ones, as transformers initialises it): random enough for
  llama.cpp, and written at disk speed;
* :func:`random_gguf` converts it with :func:`metrobench.training.export.convert_to_gguf`
  (llama.cpp's ``convert_hf_to_gguf.py``, whose vocabulary is padded with ``[PAD<i>]``
  tokens up to the config's ``vocab_size`` when the tokenizer is smaller) and quantises
  it with :func:`metrobench.training.export.quantize` (``llama-quantize`` when a binary
  is given, else the bindings' ``llama_model_quantize``), so the tensor types are what
  llama.cpp's own quantiser picks for that file type;
* :func:`metrobench.training.gguf_depth.first_blocks` then gives the same quantised blocks
  at a smaller depth, without converting again.

Contract: every output is written through a temporary and renamed into place; a
config without ``num_hidden_layers`` or ``vocab_size`` is one ``metrobench: error:``
line naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from metrobench.atomic import atomic_dir
from metrobench.errors import MetrobenchError

SHARD_BYTES = 2 * 2**30
POOL = (1 << 22) + 9_973            # numbers in the pool; not a power of two, so rows do not repeat in step
STD = 0.02
ONES = ("linear_attn.norm.weight",)  # 1-D weights transformers initialises to one
#: Classes whose ``model_type`` makes transformers' AutoTokenizer load any tokenizer as the model's own
#: (``qwen3_5_moe_text`` -> ``Qwen3_5Tokenizer``, whose pre-tokenizer the converter does not recognise
#: on SmolLM2's vocabulary). Their folder's config.json leaves ``model_type`` out: AutoTokenizer then
#: takes the tokenizer as saved, and the converter reads config.json itself (its fallback).
TOKENIZER_BY_TYPE = ("Qwen3_5MoeForCausalLM",)


def model_class(config: dict[str, Any]) -> str:
    """The transformers class a text config builds: the MoE one when it names experts."""
    return "Qwen3_5MoeForCausalLM" if config.get("num_experts") else "Qwen3_5ForCausalLM"


def text_config(config: dict[str, Any], layers: int | None = None):
    """The transformers config object of ``config`` (a ``text_config`` dict), cut to ``layers`` blocks."""
    import transformers

    for key in ("num_hidden_layers", "vocab_size"):
        if not isinstance(config.get(key), int):
            raise MetrobenchError(f"random model config: {key} is missing or not a whole number")
    values = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "dtype", "torch_dtype")}
    if layers is not None:
        types = list(values.get("layer_types") or [])
        values["num_hidden_layers"] = layers
        if types:
            if layers > len(types):
                raise MetrobenchError(f"random model config: {layers} layers asked, layer_types lists {len(types)}")
            values["layer_types"] = types[:layers]
    values.setdefault("mtp_num_hidden_layers", 1)   # as the released configs declare it (no MTP tensors: --no-mtp)
    name = model_class(config).replace("ForCausalLM", "TextConfig")
    return getattr(transformers, name)(**values)


def tensor_shapes(config: dict[str, Any], layers: int | None = None) -> dict[str, tuple[int, ...]]:
    """Every tensor the transformers class of ``config`` saves, by name, in its order (a tied head left out)."""
    import torch
    import transformers

    cfg = text_config(config, layers)
    with torch.device("meta"):
        model = getattr(transformers, model_class(config))(cfg)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


class _Pool:
    """Slices of one pool of random numbers, bfloat16, filling tensors of any size."""

    def __init__(self, seed: int) -> None:
        import torch

        generator = torch.Generator().manual_seed(seed)
        values = (torch.randn(POOL, generator=generator) * STD).to(torch.bfloat16)
        self.values = torch.cat([values, values])          # so any offset has POOL numbers after it
        self.next = int(torch.randint(0, POOL, (1,), generator=generator))

    def tensor(self, shape: tuple[int, ...]):
        import torch

        count = math.prod(shape)
        out = torch.empty(count, dtype=torch.bfloat16)
        done = 0
        while done < count:
            take = min(POOL, count - done)
            out[done:done + take] = self.values[self.next:self.next + take]
            done += take
            self.next = (self.next * 1_103_515_245 + 12_345) % POOL
        return out.view(shape)


def _values(name: str, shape: tuple[int, ...], pool: _Pool):
    import torch

    if len(shape) == 1 and name.endswith(ONES):
        return torch.ones(shape, dtype=torch.bfloat16)
    return pool.tensor(shape)


def _shards(shapes: dict[str, tuple[int, ...]]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * 2
        if batch and size + nbytes > SHARD_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(name)
        size += nbytes
    if batch:
        yield batch


def random_folder(config: dict[str, Any], dest: Path, tokenizer: Any, *, layers: int | None = None,
                  seed: int = 0) -> Path:
    """A Hugging Face folder of random bf16 weights for ``config`` at ``layers`` blocks (default: all)."""
    from safetensors.torch import save_file

    cfg = text_config(config, layers)
    cfg.architectures = [model_class(config)]
    cfg.dtype = "bfloat16"
    shapes = tensor_shapes(config, layers)
    pool = _Pool(seed)
    with atomic_dir(dest) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        batches = list(_shards(shapes))
        weight_map: dict[str, str] = {}
        for i, names in enumerate(batches, start=1):
            file = f"model-{i:05d}-of-{len(batches):05d}.safetensors"
            save_file({n: _values(n, shapes[n], pool) for n in names}, str(tmp / file), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(names, file))
        total = sum(math.prod(s) * 2 for s in shapes.values())
        (tmp / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n")
        cfg.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if model_class(config) in TOKENIZER_BY_TYPE:
            path = tmp / "config.json"
            saved = json.loads(path.read_text())
            saved.pop("model_type", None)
            path.write_text(json.dumps(saved, indent=2) + "\n")
    return Path(dest)


def random_gguf(config: dict[str, Any], out: Path, work: Path, tokenizer: Any, *, quant: str,
                layers: int | None = None, checkout: str | None = None,
                quantizer: str | Callable[[], str | None] | None = None, seed: int = 0) -> Path:
    """``out``: the random model of ``config`` at ``layers`` blocks, converted and quantised to ``quant``.

    ``work`` holds the folder and the bf16 GGUF while they are needed (removed after);
    ``checkout`` is the llama.cpp tree whose converter runs (default: the installed one's);
    ``quantizer`` a ``llama-quantize`` binary, or a function asked for one once the conversion is
    done (a build still running may provide it by then), else the bindings in this process. The
    quantised file is not load-checked here: the server that measures it loads it."""
    import shutil

    from metrobench.training.export import convert_to_gguf, quantize

    folder, wide = work / f"{out.stem}.hf", work / f"{out.stem}.bf16.gguf"
    try:
        random_folder(config, folder, tokenizer, layers=layers, seed=seed)
        convert_to_gguf(folder, wide, checkout=checkout, outtype="bf16")
        shutil.rmtree(folder, ignore_errors=True)
        binary = quantizer() if callable(quantizer) else quantizer
        quantize(wide, out, kind=quant, binary=binary, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        wide.unlink(missing_ok=True)
    return Path(out)

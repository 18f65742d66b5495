"""From adapter to servable file: merge into 16-bit weights, convert to GGUF f16, quantise to Q4_K_M.

The adapter is merged into the base loaded in bfloat16 — never into the 4-bit
weights it was trained against, which would bake quantisation error into the
student — and saved as safetensors with the serving chat template. llama.cpp's
``convert_hf_to_gguf.py`` turns that into a GGUF f16; it comes from a
configured llama.cpp checkout, or from the llama-cpp-python source distribution
of the installed version (fetched once with pip and cached). Quantisation uses
``llama_cpp.llama_model_quantize`` or a configured ``llama-quantize`` binary.

Two Qwen3.5 facts shape this module. transformers drops Qwen3.5's ``mtp.*``
(multi-token prediction) weights on load, yet the merged ``config.json`` keeps
``mtp_num_hidden_layers: 1``; the converter then declares ``n_layer + 1``
blocks with no tensors for the last one and the GGUF does not load
(ggml-org/llama.cpp#26916). Dropping the setting is no cure with the vendored
converter (it then asserts it found MTP tensors), so a model that declares MTP
but carries no MTP tensors is converted with ``--no-mtp``. And because such a
defect only shows when llama.cpp loads the file, :func:`quantize` ends by
loading the quantised GGUF and generating one token in a subprocess
(:func:`check_generates`): a broken file stops the chain at its own rule with
llama.cpp's error line, not hours later at server start.
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

from metrobench.atomic import atomic_dir, atomic_path, write_text
from metrobench.errors import MetrobenchError
from metrobench.training.base import cache_dir, resolve_base
from metrobench.training.chat_template import INFERENCE_TEMPLATE


def merge(base: str, adapter: Path, out: Path, revision: str | None = None) -> Path:
    """Merge ``adapter`` into the bfloat16 base and save ``out`` (safetensors + tokenizer)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise MetrobenchError(f"{adapter}: no adapter (adapter_config.json missing)")
    base_dir = resolve_base(base, revision)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.bfloat16)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    with atomic_dir(out) as tmp:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer = AutoTokenizer.from_pretrained(str(adapter))
        tokenizer.chat_template = INFERENCE_TEMPLATE
        tokenizer.save_pretrained(str(tmp))
    return Path(out)


def installed_build_source(version: str) -> Path | None:
    """The llama.cpp tree scripts/install-llama-cpp.sh built the installed bindings from, if still there."""
    from metrobench.agents.serving import llama_build_info

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


def declared_mtp_layers(model_dir: Path) -> int:
    """``mtp_num_hidden_layers`` of a model folder's config (top level or ``text_config``), else 0."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    for scope in (config, config.get("text_config") or {}):
        if scope.get("mtp_num_hidden_layers"):
            return int(scope["mtp_num_hidden_layers"])
    return 0


def has_mtp_tensors(model_dir: Path) -> bool:
    """Whether any safetensors file of the folder holds an ``mtp.*`` tensor (read from the headers only)."""
    import struct

    for path in Path(model_dir).glob("*.safetensors"):
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            names = json.loads(fh.read(size))
        if any(n.startswith(("mtp.", "model.mtp.")) for n in names):
            return True
    return False


def converter_flags(model_dir: Path, source: Path) -> list[str]:
    """Extra converter options the model needs: ``--no-mtp`` for an MTP setting without MTP weights."""
    if not declared_mtp_layers(model_dir) or has_mtp_tensors(model_dir):
        return []
    if "--no-mtp" not in (source / "convert_hf_to_gguf.py").read_text(encoding="utf-8"):
        raise MetrobenchError(f"{model_dir} declares an MTP block it has no weights for, and the converter in "
                              f"{source} has no --no-mtp: the GGUF would not load (use a newer llama.cpp)")
    return ["--no-mtp"]


def convert_to_gguf(model_dir: Path, out: Path, *, checkout: str | None = None, outtype: str = "f16") -> Path:
    """``convert_hf_to_gguf.py`` on a merged model folder (``--no-mtp`` where the model needs it)."""
    source = llama_cpp_source(checkout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source / "gguf-py"), str(source),
                                                       os.environ.get("PYTHONPATH", "")]))
    with atomic_path(out) as tmp:
        done = subprocess.run([sys.executable, str(source / "convert_hf_to_gguf.py"), str(model_dir),
                               "--outfile", str(tmp), "--outtype", outtype, *converter_flags(model_dir, source)],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0 or not tmp.is_file():
            raise MetrobenchError(f"convert_hf_to_gguf.py failed on {model_dir}:\n{done.stderr.strip()[-1500:]}")
    return Path(out)


_GENERATE_ONE = """\
import sys
import llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_gpu_layers=0, verbose=True)
reply = llm("<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\n", max_tokens=1, temperature=0.0)
print("generated", reply["usage"]["completion_tokens"], "token")
"""


def check_generates(gguf: Path, *, timeout: float = 600.0) -> str:
    """Load ``gguf`` with llama.cpp and generate one token, in a subprocess; raise with llama.cpp's last lines.

    A subprocess because a bad file can abort the process (a failed GGML
    assertion), and the error must be a message, not a dead job. On the CPU
    (``n_gpu_layers=0``): the check is about the file, not the device.
    """
    from metrobench.agents.serving import exit_status

    try:
        done = subprocess.run([sys.executable, "-c", _GENERATE_ONE, str(gguf)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MetrobenchError(f"{gguf}: loading and generating one token took over {timeout:.0f} s") from None
    if done.returncode != 0 or "generated 1 token" not in done.stdout:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        cause = next((ln for ln in lines if "not found" in ln or "error loading" in ln or "GGML_ASSERT" in ln),
                     lines[-1] if lines else "")
        raise MetrobenchError(f"{gguf} does not load in llama.cpp ({exit_status(done.returncode)}): {cause.strip()}\n"
                              + "\n".join(lines[-8:]))
    return done.stdout.strip()


def quantize(gguf: Path, out: Path, *, kind: str = "Q4_K_M", binary: str | None = None,
             check: bool = True) -> Path:
    """Quantise a GGUF (``llama_model_quantize``, or a ``llama-quantize`` binary), then check it generates."""
    with atomic_path(out) as tmp:
        if binary:
            done = subprocess.run([binary, str(gguf), str(tmp), kind], capture_output=True, text=True)
            if done.returncode != 0:
                raise MetrobenchError(f"{binary} failed: {done.stderr.strip()[-800:]}")
        else:
            _quantize_in_process(gguf, tmp, kind)
        if check:
            check_generates(tmp)     # before the rename: a broken file never gets the output's name
    return Path(out)


def _quantize_in_process(gguf: Path, out: Path, kind: str) -> None:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise MetrobenchError(f"unknown quantisation {kind!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    if llama_cpp.llama_model_quantize(str(gguf).encode(), str(out).encode(), params) != 0:
        raise MetrobenchError(f"quantising {gguf} to {kind} failed")


def record_sizes(paths: dict[str, Path], out: Path) -> dict[str, int]:
    """File sizes in bytes (Table 8), written as JSON."""
    sizes = {name: Path(p).stat().st_size for name, p in paths.items()}
    write_text(out, json.dumps(sizes, indent=2) + "\n")
    return sizes

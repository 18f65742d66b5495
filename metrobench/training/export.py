"""From adapter to servable file: merge into 16-bit weights, convert to GGUF f16, quantise to Q4_K_M.

The adapter is merged into the base's bfloat16 weights — never into the 4-bit
weights it was trained against, which would bake quantisation error into the
student — and saved as safetensors with the serving chat template of the
recipe the adapter was trained with (the project's, or Qwen3.5's own for the
``paper`` recipes; the GGUF then carries it). The merge
streams: each safetensors shard of the base is read one tensor at a time, the
LoRA deltas of its tensors applied (``W += scaling * B @ A`` in fp32, as PEFT's
``merge_and_unload``), and written under the shard's own name, so peak memory is
about one tensor and its fp32 delta at every model size (~2 GB at 27B,
``benchmarks/merge_memory.py``), not the whole model (~55 GB at 27B through
transformers). The weights equal transformers + PEFT's merge tensor for tensor.
Only plain LoRA on linear layers is merged; DoRA, trained biases, extra trained
modules and the like stop with one line. llama.cpp's
``convert_hf_to_gguf.py`` turns that into a GGUF f16. Where the student is served
on a named llama.cpp build (``student_serving.serving.build``, config
``export.converter: serving``, the default), that build converts, quantises with
its own ``llama-quantize`` and loads the result in its own ``llama-server``
(:func:`build_tools`; ``make builds`` installs all three): one llama.cpp from GGUF
to server, as the paper's students were, and a file the server cannot read stops
at the quantise rule. Otherwise the converter comes from a configured llama.cpp
checkout, or from the llama-cpp-python source distribution of the installed
version (fetched once with pip and cached), and quantisation uses
``llama_cpp.llama_model_quantize``. Which llama.cpp did each is recorded beside
the sizes (``gguf_sizes.json``, Table 8).

Two Qwen3.5 facts shape this module. transformers drops Qwen3.5's ``mtp.*``
(multi-token prediction) weights on load, yet the merged ``config.json`` keeps
``mtp_num_hidden_layers: 1``; a converter that knows MTP then declares
``n_layer + 1`` blocks with no tensors for the last one and the GGUF does not
load (ggml-org/llama.cpp#26916). Dropping the setting is no cure with the
vendored converter (it then asserts it found MTP tensors), so a model that
declares MTP but carries no MTP tensors is converted with ``--no-mtp`` where
the converter offers it, which the converter's own ``--help`` says
(:func:`converter_flags`). A converter that offers no such option may still be
right: one from before llama.cpp knew MTP (the b8642 era) skips ``mtp.*`` and
counts no extra block. So the converter is asked, not judged by its source:
it converts without the option, and the written GGUF's header is read
(:func:`gguf_blocks`); a file that declares a block it holds no tensor for is
refused in one line naming the converter (:func:`check_blocks`), before the
file gets its name. And because a defect of the weights only shows when
llama.cpp runs the file, :func:`quantize` ends by loading the quantised GGUF
and generating :data:`CHECK_TOKENS` tokens greedily from a short chat prompt in
a subprocess (:func:`check_generates`; :func:`check_serves` on a named build):
a file llama.cpp cannot read, or a model whose logits are NaN or infinite (a
training that diverged: NaN LoRA weights merged into the base) or carry no
information at all (every logit equal), stops the chain at its own rule, not
hours later as a student that scores near zero as if that were a result.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrobench.atomic import atomic_dir, atomic_path, write_text
from metrobench.errors import MetrobenchError
from metrobench.training.base import cache_dir, base_folder
from metrobench.training.loadcheck import CHECK_PROMPT, CHECK_TOKENS, MARKER
from metrobench.agents.chat_template import served_template


#: Adapter settings the streaming merge applies as PEFT does; any other value of these is
#: refused with one line (DoRA, bias training, per-module ranks/alphas, extra trained modules:
#: what a plain ``W += scale * B @ A`` would silently mis-merge).
_LORA_PLAIN = {"peft_type": "LORA", "use_dora": False, "lora_bias": False, "bias": "none",
               "modules_to_save": None, "alpha_pattern": {}, "rank_pattern": {}, "use_qalora": False,
               "target_parameters": None, "trainable_token_indices": None, "layer_replication": None,
               "alora_invocation_tokens": None, "use_bdlora": None, "arrow_config": None, "kasa_config": None,
               "monteclora_config": None, "velora_config": None}
#: Bytes per element of the safetensors dtypes; the floating ones are saved as bfloat16.
_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_FLOATS = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
_CHUNK = 64 * 2**20          # bytes read at a time of a tensor that gets no LoRA delta


@dataclass(frozen=True)
class LoraDelta:
    """One adapted linear layer's LoRA pair, merged as PEFT's ``Linear.merge`` does."""

    a: Any                   # lora_A.weight, (r, in)
    b: Any                   # lora_B.weight, (out, r)
    scaling: float
    fan_in_fan_out: bool

    def apply(self, weight: Any) -> Any:
        """``weight += transpose(B @ A) * scaling``: the delta in fp32, added in place to the bf16 weight."""
        delta = self.b.float() @ self.a.float()
        delta = (delta.T if self.fan_in_fan_out else delta).mul_(self.scaling)   # PEFT: `* scaling`, same bits
        if tuple(delta.shape) != tuple(weight.shape):
            raise MetrobenchError(f"LoRA delta of shape {tuple(delta.shape)} for a weight of shape "
                                  f"{tuple(weight.shape)}: the adapter was not trained on this base")
        weight += delta
        return weight


def lora_settings(adapter: Path) -> dict[str, Any]:
    """The adapter's ``adapter_config.json``, refused with one line if it asks for more than plain LoRA."""
    path = Path(adapter) / "adapter_config.json"
    if not path.is_file():
        raise MetrobenchError(f"{adapter}: no adapter (adapter_config.json missing)")
    settings = json.loads(path.read_text(encoding="utf-8"))
    for key, plain in _LORA_PLAIN.items():
        value = settings.get(key, plain)
        if (value or None) != (plain or None):     # None, {}, False and absent alike
            raise MetrobenchError(f"{path}: {key}={value!r} is not supported by the streaming merge "
                                  f"(plain LoRA only: {key} must be {plain!r})")
    return settings


def _scaling(settings: dict[str, Any]) -> float:
    alpha, rank = settings["lora_alpha"], settings["r"]
    return alpha / math.sqrt(rank) if settings.get("use_rslora") else alpha / rank


def _checkpoint_name(module: str, names: set[str]) -> str:
    """The base checkpoint's name of an adapted module's weight.

    The adapter names modules as the loaded model does; a Qwen3.5 checkpoint that
    wraps the text model (``Qwen3_5ForConditionalGeneration``) stores them under
    ``model.language_model.``, which transformers strips on load into
    ``Qwen3_5ForCausalLM`` and restores on save.
    """
    candidates = [f"{module}.weight"]
    if module.startswith("model."):
        candidates.append(f"model.language_model.{module[len('model.'):]}.weight")
    found = [c for c in candidates if c in names]
    if len(found) != 1:
        raise MetrobenchError(f"adapter module {module}: {'no' if not found else 'two'} matching weight in the "
                              f"base checkpoint ({' or '.join(candidates)})")
    return found[0]


def adapter_deltas(adapter: Path, settings: dict[str, Any], names: set[str]) -> dict[str, LoraDelta]:
    """The adapter's LoRA pairs by the base checkpoint's weight name; any other adapter tensor is refused."""
    from safetensors.torch import load_file

    path = Path(adapter) / "adapter_model.safetensors"
    if not path.is_file():
        raise MetrobenchError(f"{adapter}: no adapter_model.safetensors")
    tensors = load_file(str(path))
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        match = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", key)
        if match is None:
            raise MetrobenchError(f"{path}: tensor {key} is not a LoRA pair of a linear layer "
                                  "(the streaming merge handles plain LoRA only)")
        pairs.setdefault(match.group(1), {})[match.group(2)] = tensor
    deltas = {}
    for module, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise MetrobenchError(f"{path}: {module} has lora_{''.join(pair)} without its partner")
        deltas[_checkpoint_name(module, names)] = LoraDelta(
            pair["A"], pair["B"], _scaling(settings), bool(settings.get("fan_in_fan_out")))
    return deltas


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's tensor entries (``__metadata__`` left out) and where its data starts."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def base_shards(base_dir: Path) -> list[Path]:
    """The base's safetensors files: those its index names that are present, else ``model.safetensors``."""
    index = base_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        shards = [base_dir / f for f in files if (base_dir / f).is_file()]
    else:
        shards = [base_dir / "model.safetensors"] if (base_dir / "model.safetensors").is_file() else []
    if not shards:
        raise MetrobenchError(f"{base_dir}: no safetensors weights (the streaming merge reads safetensors only)")
    return shards


def _saved_dtype(dtype: str) -> str:
    """What a tensor is saved as: the floating ones bfloat16 (the base is loaded in bfloat16), others as stored."""
    if dtype not in _ITEMSIZE:
        raise MetrobenchError(f"safetensors dtype {dtype} is not supported by the streaming merge")
    return "BF16" if dtype in _FLOATS else dtype


def _read_tensor(fh, entry: dict[str, Any], start: int, first: int = 0, count: int | None = None):
    """Elements ``first .. first+count`` of a stored tensor, as a flat torch tensor of its own dtype."""
    import torch

    size = _ITEMSIZE[entry["dtype"]]
    total = math.prod(entry["shape"])
    count = total - first if count is None else count
    fh.seek(start + entry["data_offsets"][0] + first * size)
    buf = bytearray(count * size)
    if fh.readinto(buf) != len(buf):
        raise MetrobenchError(f"{fh.name}: truncated tensor data")
    return torch.frombuffer(buf, dtype=getattr(torch, _FLOATS[entry["dtype"]])) if count else torch.empty(0)


def _copy_tensor(fin, fout, entry: dict[str, Any], start: int) -> None:
    """A tensor without a delta, in chunks: raw bytes when it stays as stored, else cast to bfloat16."""
    import torch

    size = _ITEMSIZE[entry["dtype"]]
    total = math.prod(entry["shape"])
    step = max(1, _CHUNK // size)
    if _saved_dtype(entry["dtype"]) == entry["dtype"]:
        fin.seek(start + entry["data_offsets"][0])
        left = total * size
        while left:
            block = fin.read(min(_CHUNK, left))
            if not block:
                raise MetrobenchError(f"{fin.name}: truncated tensor data")
            fout.write(block)
            left -= len(block)
        return
    for first in range(0, total, step):
        part = _read_tensor(fin, entry, start, first, min(step, total - first)).to(torch.bfloat16)
        fout.write(part.view(torch.uint8).numpy())


def merge_shard(src: Path, dst: Path, deltas: dict[str, LoraDelta], keep) -> dict[str, int]:
    """Write ``src`` to ``dst`` with the deltas of its tensors applied, one tensor in memory at a time.

    Tensors ``keep`` rejects are left out; the rest keep their names, shapes and
    order, floating ones saved as bfloat16. Returns the bytes written by tensor name.
    """
    import torch

    header, start = read_safetensors_header(src)
    entries = sorted(((n, e) for n, e in header.items() if keep(n)), key=lambda item: item[1]["data_offsets"][0])
    out: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, entry in entries:
        dtype = _saved_dtype(entry["dtype"])
        nbytes = math.prod(entry["shape"]) * _ITEMSIZE[dtype]
        out[name] = {"dtype": dtype, "shape": entry["shape"], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if not entries:
        return {}
    raw = json.dumps(out, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(struct.pack("<Q", len(raw)) + raw)
        for name, entry in entries:
            if name not in deltas:
                _copy_tensor(fin, fout, entry, start)
                continue
            weight = _read_tensor(fin, entry, start).to(torch.bfloat16).reshape(entry["shape"])
            fout.write(deltas[name].apply(weight).view(torch.uint8).numpy())
    return {name: out[name]["data_offsets"][1] - out[name]["data_offsets"][0] for name, _ in entries}


def _causal_lm_skeleton(base_dir: Path):
    """The model transformers' AutoModelForCausalLM builds from the base's config, on the meta device (no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(base_dir))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _dropped(model) -> Any:
    """A predicate for the checkpoint tensors transformers drops on load (Qwen3.5's ``mtp.*``, its vision tower)."""
    patterns = [re.compile(p) for p in (model._keys_to_ignore_on_load_unexpected or [])]
    return lambda name: any(p.search(name) for p in patterns)


def _save_configs(model, base_dir: Path, out: Path) -> None:
    """config.json and generation_config.json as ``save_pretrained`` writes them for the bf16 model."""
    from transformers import GenerationConfig

    config = model.config
    config.architectures = [type(model).__name__]
    config.dtype = "bfloat16"
    config.save_pretrained(str(out))
    try:
        generation = GenerationConfig.from_pretrained(str(base_dir))
    except OSError:
        generation = GenerationConfig.from_model_config(config)
    generation.save_pretrained(str(out))


def merge_adapter(base: str, adapter: Path, out: Path, revision: str | None = None) -> Path:
    """Merge ``adapter`` into the bfloat16 base, shard by shard, and save ``out`` (safetensors + tokenizer).

    Each safetensors shard of the base is rewritten under its own name with the
    LoRA deltas of its tensors applied (:func:`merge_shard`): peak memory is one
    tensor and its delta, never the model. The result equals transformers' load
    in bfloat16 + PEFT's ``merge_and_unload`` + ``save_pretrained`` tensor for
    tensor (``tests/test_training.py``); tensors transformers drops on load
    (Qwen3.5's MTP block and vision tower) are dropped here too.
    """
    from transformers import AutoTokenizer

    adapter = Path(adapter)
    settings = lora_settings(adapter)
    base_dir = base_folder(base, revision)
    model = _causal_lm_skeleton(base_dir)
    shards = base_shards(base_dir)
    names = {name for shard in shards for name in read_safetensors_header(shard)[0]}
    deltas = adapter_deltas(adapter, settings, names)
    dropped = _dropped(model)
    with atomic_dir(out) as tmp:
        written: dict[str, str] = {}
        total = 0
        for shard in shards:
            sizes = merge_shard(shard, tmp / shard.name, deltas, lambda name: not dropped(name))
            written.update(dict.fromkeys(sizes, shard.name))
            total += sum(sizes.values())
        unmerged = sorted(deltas.keys() - written.keys())
        if unmerged:
            raise MetrobenchError(f"{adapter}: adapted weight {unmerged[0]} is one transformers drops on load")
        if (base_dir / "model.safetensors.index.json").is_file():
            index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(written.items()))}
            write_text(tmp / "model.safetensors.index.json", json.dumps(index, indent=2) + "\n")
        _save_configs(model, base_dir, tmp)
        tokenizer = AutoTokenizer.from_pretrained(str(adapter))
        tokenizer.chat_template = served_template(tokenizer.chat_template)   # the recipe's (train.py)
        tokenizer.save_pretrained(str(tmp))
    return Path(out)


@dataclass(frozen=True)
class BuildTools:
    """A named llama.cpp build's converter folder, ``llama-quantize`` and ``llama-server``, as
    ``scripts/install-llama-cpp.sh`` installed them (``make builds``), with its record."""

    name: str
    converter: Path
    quantizer: Path
    server: Path
    record: dict[str, Any]

    def describe(self) -> str:
        """``b8642 (commit 1a2b3c4d5e6f)``; the vendored tree under a name says so."""
        if self.record.get("source") == "vendored":
            return f"{self.name} (the vendored llama.cpp of llama-cpp-python {self.record.get('llama_cpp_python')})"
        commit = self.record.get("commit")
        return f"{self.name} (commit {commit[:12]})" if commit else self.name


def build_tools(name: str) -> BuildTools:
    """The named build's tools; one line saying how to install them when they are not there."""
    from metrobench.agents.serving import named_build

    server = named_build(name)          # not installed: the `make builds` hint
    folder = server.parent
    converter, quantizer = folder / "convert", folder / "llama-quantize"
    if not (converter / "convert_hf_to_gguf.py").is_file() or not os.access(quantizer, os.X_OK):
        raise MetrobenchError(f"llama.cpp build {name} in {folder} has no converter or llama-quantize (installed "
                              f"before they were): reinstall it with `make builds FORCE=1`, or set "
                              f"export.converter: vendored to convert with the vendored llama.cpp")
    try:
        record = json.loads((folder / "metrobench-build.json").read_text())
    except (OSError, ValueError):
        record = {}
    return BuildTools(name, converter, quantizer, server, record)


def vendored_description(checkout: str | None = None) -> str:
    """What converts and quantises without a named build: a checkout, or the bindings' own llama.cpp."""
    if checkout:
        return f"llama.cpp checkout {checkout}"
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return f"the vendored llama.cpp of llama-cpp-python {version}"


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


def converter_env(source: Path) -> dict[str, str]:
    """The environment a llama.cpp tree's converter runs in: its own ``gguf-py`` and modules first."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(source / "gguf-py"), str(source),
                                                        os.environ.get("PYTHONPATH", "")]))


def converter_options(source: Path) -> set[str]:
    """The options ``convert_hf_to_gguf.py --help`` of the tree at ``source`` lists.

    The converter is asked rather than its source read: an option's string can sit in
    the source without being an option (a comment, a message), and the converter of a
    split tree (``conversion/``) defines its behaviour outside the script.
    """
    try:
        done = subprocess.run([sys.executable, str(source / "convert_hf_to_gguf.py"), "--help"],
                              capture_output=True, text=True, env=converter_env(source), timeout=300)
    except subprocess.TimeoutExpired:
        raise MetrobenchError(f"{source / 'convert_hf_to_gguf.py'} --help took over 300 s") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise MetrobenchError(f"{source / 'convert_hf_to_gguf.py'} --help failed: "
                              f"{lines[-1].strip() if lines else f'exit status {done.returncode}'}")
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", done.stdout))


def converter_flags(model_dir: Path, source: Path) -> list[str]:
    """Extra converter options the model needs: ``--no-mtp`` for an MTP setting without MTP weights,
    where the converter offers it.

    A converter without the option is not refused here: one that knows no MTP converts such
    a folder as it is, and :func:`convert_to_gguf` reads the file it wrote
    (:func:`check_blocks`) to refuse one that counted the MTP block anyway.
    """
    if not needs_no_mtp(model_dir):
        return []
    return ["--no-mtp"] if "--no-mtp" in converter_options(source) else []


def needs_no_mtp(model_dir: Path) -> bool:
    """Whether the folder declares MTP layers (``mtp_num_hidden_layers``) but holds no MTP tensor."""
    return bool(declared_mtp_layers(model_dir)) and not has_mtp_tensors(model_dir)


#: GGUF metadata value types (ggml's gguf.h, ``enum gguf_type``) and the struct format of the fixed-size ones.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_blocks(path: Path) -> tuple[str, int | None, set[int]]:
    """A GGUF's architecture, its ``<arch>.block_count`` and the block numbers it holds tensors for.

    Read from the header only (metadata and tensor names, no tensor data), as the GGUF
    format defines it (version 2 and 3: little-endian, 64-bit counts), so it costs the same
    at 27B as on a test model.
    """
    with open(path, "rb") as fh:
        def read(fmt: str):
            size = struct.calcsize("<" + fmt)
            raw = fh.read(size)
            if len(raw) != size:
                raise MetrobenchError(f"{path}: truncated GGUF header")
            return struct.unpack("<" + fmt, raw)[0]

        def string() -> str:
            return fh.read(read("Q")).decode("utf-8", errors="replace")

        def value(kind: int):
            if kind in _GGUF_SCALARS:
                return read(_GGUF_SCALARS[kind])
            if kind == _GGUF_STRING:
                return string()
            if kind == _GGUF_ARRAY:
                item, count = read("I"), read("Q")
                if item in _GGUF_SCALARS:              # skipped, not parsed: token tables are long
                    fh.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), os.SEEK_CUR)
                else:
                    for _ in range(count):
                        value(item)
                return None
            raise MetrobenchError(f"{path}: GGUF metadata of unknown type {kind}")

        if fh.read(4) != b"GGUF" or read("I") < 2:
            raise MetrobenchError(f"{path}: not a GGUF file of version 2 or later")
        n_tensors, n_kv = read("Q"), read("Q")
        metadata = {}
        for _ in range(n_kv):
            key = string()
            metadata[key] = value(read("I"))
        blocks = set()
        for _ in range(n_tensors):
            name = string()
            fh.seek(read("I") * 8 + 4 + 8, os.SEEK_CUR)    # dims, type, offset
            match = re.match(r"blk\.(\d+)\.", name)
            if match:
                blocks.add(int(match.group(1)))
    arch = str(metadata.get("general.architecture", ""))
    count = metadata.get(f"{arch}.block_count")
    return arch, int(count) if count is not None else None, blocks


def check_blocks(gguf: Path, model_dir: Path, converter: str) -> None:
    """Refuse, in one line, a GGUF that declares blocks it holds no tensor for.

    What a converter that knows MTP but was given no ``--no-mtp`` writes for a folder that
    declares an MTP block without its weights: ``block_count`` one above the blocks present,
    which llama.cpp refuses at load (``tensor 'blk.N.attn_norm.weight' not found``).
    """
    arch, count, blocks = gguf_blocks(gguf)
    if count is None:
        return
    empty = sorted(set(range(count)) - blocks)
    if empty:
        mtp = (f"; {model_dir} declares {declared_mtp_layers(model_dir)} MTP layer(s) and holds no MTP "
               "weights, and this converter counts them but offers no --no-mtp") if needs_no_mtp(model_dir) else ""
        raise MetrobenchError(f"{converter} wrote a GGUF whose {arch}.block_count is {count} but which holds no "
                              f"tensor for block {', '.join(map(str, empty))}: llama.cpp would not load it{mtp} "
                              "(use a llama.cpp whose converter offers --no-mtp)")


def convert_to_gguf(model_dir: Path, out: Path, *, checkout: str | None = None, outtype: str = "f16",
                    build: BuildTools | None = None) -> Path:
    """``convert_hf_to_gguf.py`` on a merged model folder (``--no-mtp`` where the model needs it and
    the converter offers it): the named ``build``'s converter when given, else :func:`llama_cpp_source`'s.

    For a folder that declares MTP layers without their weights, the written file's header is
    checked (:func:`check_blocks`) before it gets its name.
    """
    source = build.converter if build else llama_cpp_source(checkout)
    fallback = (f" (llama.cpp build {build.name}'s converter; export.converter: vendored converts with the "
                f"vendored llama.cpp instead)") if build else ""
    converter = f"llama.cpp build {build.name}'s converter" if build else f"the converter in {source}"
    env = converter_env(source)
    try:
        flags = converter_flags(model_dir, source)
    except MetrobenchError as exc:
        raise MetrobenchError(f"{exc}{fallback}") from None
    with atomic_path(out) as tmp:
        done = subprocess.run([sys.executable, str(source / "convert_hf_to_gguf.py"), str(model_dir),
                               "--outfile", str(tmp), "--outtype", outtype, *flags],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0 or not tmp.is_file():
            raise MetrobenchError(f"convert_hf_to_gguf.py failed on {model_dir}{fallback}:\n"
                                  f"{done.stderr.strip()[-1500:]}")
        if needs_no_mtp(model_dir) and not flags:
            try:
                check_blocks(tmp, model_dir, converter)
            except MetrobenchError as exc:
                raise MetrobenchError(f"{exc}{fallback}") from None
    return Path(out)


def _refuse_logits(gguf: Path, bad: dict[str, Any], where: str) -> MetrobenchError:
    """The one line for a file that loads but whose logits are not numbers (:func:`loadcheck.logit_problem`)."""
    return MetrobenchError(f"{gguf} loads in {where} but does not compute: at generated token {bad['token']} "
                           f"of {CHECK_TOKENS}, {bad['what']} (NaN weights, from a training that diverged, "
                           "or a broken file); not kept")


def check_generates(gguf: Path, *, timeout: float = 600.0) -> str:
    """Load ``gguf`` with llama.cpp and generate :data:`CHECK_TOKENS` tokens greedily, in a subprocess
    (:mod:`metrobench.training.loadcheck`); raise with llama.cpp's last lines when it does not load, and
    in one line when a position's logits are not numbers (:func:`loadcheck.logit_problem`).

    A subprocess because a bad file can abort the process (a failed GGML
    assertion), and the error must be a message, not a dead job. On the CPU
    (``n_gpu_layers=0``): the check is about the file, not the device. Every
    generated position's whole logit vector is checked, not the text: a greedy
    pick over NaN is still a token.
    """
    from metrobench.agents.serving import exit_status

    try:
        done = subprocess.run([sys.executable, "-m", "metrobench.training.loadcheck", str(gguf)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MetrobenchError(f"{gguf}: loading and generating {CHECK_TOKENS} tokens took over "
                              f"{timeout:.0f} s") from None
    report = next((json.loads(ln[len(MARKER):]) for ln in done.stdout.splitlines() if ln.startswith(MARKER)), None)
    if done.returncode != 0 or report is None:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        cause = next((ln for ln in lines if "not found" in ln or "error loading" in ln or "GGML_ASSERT" in ln),
                     lines[-1] if lines else "")
        raise MetrobenchError(f"{gguf} does not load in llama.cpp ({exit_status(done.returncode)}): {cause.strip()}\n"
                              + "\n".join(lines[-8:]))
    if report["bad"]:
        raise _refuse_logits(gguf, report["bad"], "llama.cpp")
    return f"generated {len(report['tokens'])} tokens: {report['tokens']}"


def check_serves(gguf: Path, build: BuildTools, *, timeout: float = 600.0) -> None:
    """Start ``build``'s llama-server on ``gguf`` (CPU, 256 tokens) and have it generate
    :data:`CHECK_TOKENS` tokens greedily, each with its probability; refuse a model that does not compute.

    The server that will serve the student reads the file: a header or tensor type it does not
    know stops here with its own log lines, not at the student's first run. The server gives no
    logit vector, so the check reads what it does give (``n_probs``): the chosen token's
    log-probability at each position, which is ``null`` where the logits are NaN or infinite,
    and the largest probability, which is exactly ``1 / n_vocab`` only where every logit is
    equal (:func:`served_problem`; the same two failures :func:`check_generates` finds). A
    server that returns no probabilities is not refused for it: the load and the generation
    are then what is checked.
    """
    import httpx

    from metrobench.agents.serving import ServerConfig, llama_server

    cfg = ServerConfig(model_path=Path(gguf), binary=str(build.server), n_ctx=256, parallel=1,
                       flash_attn=False, n_gpu_layers=0)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        try:
            with llama_server(cfg, log_path=log, startup_timeout=timeout) as base:
                reply = httpx.post(f"{base.removesuffix('/v1')}/completion", timeout=timeout, json={
                    "prompt": CHECK_PROMPT, "n_predict": CHECK_TOKENS, "temperature": 0, "n_probs": 1,
                    "ignore_eos": True})
                models = httpx.get(f"{base}/models", timeout=timeout)
        except MetrobenchError as exc:
            raise MetrobenchError(f"{gguf} does not load in llama.cpp build {build.name}'s llama-server: "
                                  f"{exc}") from None
        if reply.status_code != 200 or "content" not in reply.json():
            raise MetrobenchError(f"{gguf}: llama.cpp build {build.name}'s llama-server loaded it but did not "
                                  f"generate (HTTP {reply.status_code}): {reply.text[:300]}")
    n_vocab = next((m.get("meta", {}).get("n_vocab") for m in models.json().get("data", [])),
                   None) if models.status_code == 200 else None
    bad = served_problem(reply.json().get("completion_probabilities") or [], n_vocab)
    if bad:
        raise _refuse_logits(gguf, bad, f"llama.cpp build {build.name}'s llama-server")


def served_problem(probabilities: list[dict[str, Any]], n_vocab: int | None) -> dict[str, Any] | None:
    """The first generated position at which llama-server's probabilities show a model that does not compute.

    ``probabilities`` is the ``completion_probabilities`` of a ``/completion`` reply with
    ``n_probs``: per position the chosen token's ``logprob``, the greedy pick, so the largest.
    One that is not a finite number (the server writes NaN as ``null``) means NaN or infinite
    logits; one of ``-log(n_vocab)`` means every logit is equal (the largest probability of a
    distribution is ``1 / n_vocab`` only when it is uniform; 1e-5 is float32's rounding of it).
    Entries without a ``logprob`` are not judged.
    """
    for position, entry in enumerate(probabilities, start=1):
        if "logprob" not in entry:
            continue
        logprob = entry["logprob"]
        if not isinstance(logprob, (int, float)) or not math.isfinite(logprob):
            return {"token": position, "what": f"the chosen token's log-probability is {logprob} "
                                               "(NaN or infinite logits)"}
        if n_vocab and n_vocab > 1 and math.isclose(logprob, -math.log(n_vocab), rel_tol=0, abs_tol=1e-5):
            return {"token": position, "what": f"all {n_vocab} logits equal (top probability 1/{n_vocab})"}
    return None


def quantize(gguf: Path, out: Path, *, kind: str = "Q4_K_M", binary: str | None = None,
             check: bool = True, build: BuildTools | None = None) -> Path:
    """Quantise a GGUF, then check it generates: with the named ``build``'s ``llama-quantize`` and
    llama-server when given, else ``llama_model_quantize`` (or a ``llama-quantize`` ``binary``)
    and the bindings."""
    binary = str(build.quantizer) if build else binary
    with atomic_path(out) as tmp:
        if binary:
            done = subprocess.run([binary, str(gguf), str(tmp), kind], capture_output=True, text=True)
            if done.returncode != 0:
                raise MetrobenchError(f"{binary} failed: {done.stderr.strip()[-800:]}")
        else:
            _quantize_in_process(gguf, tmp, kind)
        if check:            # before the rename: a broken file never gets the output's name
            if build:
                check_serves(tmp, build)
            else:
                check_generates(tmp)
    return Path(out)


def _quantize_in_process(gguf: Path, out: Path, kind: str) -> None:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise MetrobenchError(f"unknown quantisation {kind!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    if llama_cpp.llama_model_quantize(str(gguf).encode(), str(out).encode(), params) != 0:
        raise MetrobenchError(f"quantising {gguf} to {kind} failed (llama.cpp's reason is on the lines above; "
                              "`found nan value` there means NaN weights: a training that diverged)")


#: The key of ``gguf_sizes.json`` that says which llama.cpp converted and quantised the files.
LLAMA_CPP_KEY = "llama_cpp"


def record_sizes(paths: dict[str, Path], out: Path, llama_cpp: str | None = None) -> dict[str, Any]:
    """File sizes in bytes (Table 8), and which llama.cpp made them, written as JSON."""
    sizes: dict[str, Any] = {name: Path(p).stat().st_size for name, p in paths.items()}
    if llama_cpp:
        sizes[LLAMA_CPP_KEY] = llama_cpp
    write_text(out, json.dumps(sizes, indent=2) + "\n")
    return sizes

"""The serving record: what, besides the model config, decides a run's answers.

The paper shows serving moves scores (Qwen3.5-27B on llama.cpp b10398 instead
of b8642, nothing else changed: held-out Tier 1 92.32 -> 93.08, App. B.4), so a
run records, beside its model-config fingerprint:

* for a model served here: the ``llama-server`` build (:func:`server_build`:
  ``--version``'s number and commit in either of llama.cpp's formats, and what
  the install script's record beside the binary says it is: a named build's
  name, the upstream ``bNNNN`` tag it was built from, or that it is the
  vendored tree; with no record beside it an upstream binary's own build
  number gives the tag), the SHA-256 of the GGUF
  (computed once per file, cached by path, size and mtime), the SHA-256 of the
  chat template the server actually uses (``/props``), and the server flags
  (context per slot, slots, unified KV, flash attention, layers on the GPU, and
  ``extra_args``, the flags ``serving`` does not own: ``-ctk q8_0`` changes the
  answers as surely as the file does);
* for a hosted model: its dialect, deployment and API version.

:func:`differences` names what differs between two records, so a resume can
refuse a transcript made with another build, file or template and say which. A
local record made before ``extra_args`` were recorded is read as having had none:
a resume with server flags added since is refused (or set aside), never mixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx

from metrobench.atomic import write_text
from metrobench.errors import MetrobenchError
from metrobench.data.root import sha256_file

#: The fields a resume compares, with the words that name them in an error.
COMPARED = {"build": "llama-server build", "gguf_sha256": "GGUF file (SHA-256)",
            "template_sha256": "chat template (SHA-256)", "ctx_per_slot": "context per slot",
            "n_gpu_layers": "layers on the GPU", "flash_attn": "flash attention", "parallel": "slots",
            "extra_args": "other server flags (serving.extra_args)",
            "dialect": "API dialect", "deployment": "deployment", "api_version": "API version"}
#: ``--version``'s first line: ``version: 0.5.0-dev (build 8642, commit a1b2c3d)`` (llama.cpp with a
#: semantic version), or ``version: 8642 (a1b2c3d4)`` (the build number is the version); the commit is
#: ``unknown`` where the tree was built outside git.
_VERSION = re.compile(r"version:\s*(?P<version>\S+)\s*\(build\s+(?P<build>\d+),\s*commit\s+(?P<commit>[0-9a-zA-Z]+)\)")
_VERSION_OLD = re.compile(r"version:\s*(?P<build>\d+)\s*\((?P<commit>[0-9a-zA-Z]+)\)")
#: The install script's record beside a binary (scripts/install-llama-cpp.sh).
RECORD = "metrobench-build.json"
#: Seconds ``llama-server --version`` may take before the build is refused as not answering (it prints
#: and exits at once; only a hung binary, or a wrapper script waiting on something, reaches this).
VERSION_TIMEOUT_S = 60.0


def cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "metrobench" / "gguf-sha256.json"


def gguf_sha256(path: Path | str) -> str:
    """The file's SHA-256, from the cache when its path, size, mtime, inode and ctime are unchanged.

    Size and mtime alone miss a file replaced by another of its size with the mtime carried over
    (``cp -p``, ``rsync -t``, ``tar x``); none of those can set the ctime, and a new file has a new
    inode. A cache that does not parse, or is not a mapping of strings, is rebuilt.
    """
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}|{stat.st_ctime_ns}"
    cache = cache_file()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict) or not all(isinstance(v, str) for v in known.values()):
        known = {}
    if key in known:
        return known[key]
    known = {k: v for k, v in known.items() if not k.startswith(f"{path}|")}
    known[key] = sha256_file(path)
    try:
        write_text(cache, json.dumps(known, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only home: hashed again next time, never wrong
    return known[key]


def parse_version(text: str) -> dict[str, Any]:
    """``--version``'s output read: version, build number and commit (``None`` each where it says nothing)."""
    match = _VERSION.search(text)
    if match:
        info: dict[str, Any] = match.groupdict()
    elif (old := _VERSION_OLD.search(text)):
        info = {"version": old["build"], **old.groupdict()}
    else:
        return {"version": None, "build": None, "commit": None}
    info["build"] = int(info["build"])
    if info["commit"] == "unknown":
        info["commit"] = None
    return info


def install_record(binary: Path | str) -> dict[str, Any] | None:
    """The install script's record beside ``binary`` (its folder's ``metrobench-build.json``), if any."""
    path = Path(binary).resolve().parent / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def server_build(binary: Path | str) -> dict[str, Any]:
    """What build ``binary`` is: ``--version``'s version, build number and commit, and its upstream tag.

    The tag comes from the install script's record where one lies beside the binary (``None``
    for the vendored tree, whatever number git gave it); a named build adds its ``name`` and, when
    it is the vendored tree, ``source: vendored``. With no record, an upstream binary's own build
    number (above 1: a shallow clone counts 1) is its tag.
    """
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise MetrobenchError(f"{binary} --version did not answer within {VERSION_TIMEOUT_S:g} s (a hung "
                              f"binary?): the build cannot be recorded; run it by hand to see why") from None
    except OSError as exc:
        raise MetrobenchError(f"{binary} --version: {exc.strerror or exc}") from None
    info = parse_version(done.stdout + done.stderr)
    record = install_record(binary)
    if record is None:
        info["tag"] = f"b{info['build']}" if info["build"] and info["build"] > 1 else None
        return info
    info["tag"] = record.get("tag") if isinstance(record.get("tag"), str) else None
    if "llama_cpp_python" in record and "key" in record:          # the default build: the vendored tree
        return info
    info["name"] = record.get("name") or Path(binary).resolve().parent.name
    if record.get("source") == "vendored":
        info["source"] = "vendored"
        info["tag"] = None
    return info


def build_label(build: dict[str, Any] | None) -> str:
    """A build in words: its tag, else its name and what it is, else its number and commit."""
    if not build:
        return "unknown"
    if build.get("tag"):
        return build["tag"]
    what = "the vendored tree" if build.get("source") == "vendored" else f"commit {build.get('commit')}"
    if build.get("name"):
        return f"{build['name']} ({what}, build {build.get('build')})"
    return f"build {build.get('build')} (commit {build.get('commit')})"


def served_template_sha256(base_url: str) -> str | None:
    """SHA-256 of the chat template the running server applies (its ``/props``), if it says."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    try:
        props = httpx.get(f"{root}/props", timeout=30.0).json()
    except (httpx.HTTPError, ValueError):
        return None
    template = props.get("chat_template") if isinstance(props, dict) else None
    return hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest() if isinstance(template, str) \
        else None


def local_record(serving: Any, model_path: Path, binary: Path | None, base_url: str) -> dict[str, Any]:
    """The record of a model served here by llama.cpp."""
    record: dict[str, Any] = {
        "server": serving.server, "gguf": Path(model_path).name, "gguf_sha256": gguf_sha256(model_path),
        "n_ctx": serving.n_ctx, "ctx_per_slot": serving.slot_ctx, "parallel": serving.parallel,
        "kv_unified": serving.kv_unified, "flash_attn": serving.flash_attn, "n_gpu_layers": serving.n_gpu_layers,
        "extra_args": list(serving.extra_args)}
    if binary is not None:
        record["build"] = server_build(binary)
        record["template_sha256"] = served_template_sha256(base_url)
    return record


def hosted_record(cfg: Any) -> dict[str, Any]:
    """The record of a hosted model: what endpoint dialect and deployment answered."""
    return {"dialect": cfg.provider, "deployment": cfg.served_model, "api_version": cfg.api_version}


def differences(recorded: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """What differs between a transcript's serving record and this run's, in words (empty: the same).

    A transcript made before serving was recorded has no record: nothing to compare."""
    if not recorded:
        return []
    if "gguf_sha256" in recorded and "gguf_sha256" in now and "extra_args" not in recorded:
        recorded = {**recorded, "extra_args": []}  # a local record from before they were recorded
    out = []
    for key, words in COMPARED.items():
        if key in recorded and key in now and recorded[key] != now[key]:
            if key == "build":
                out.append(f"{words} {build_label(recorded[key])}, now {build_label(now[key])}")
            elif key == "extra_args":
                out.append(f"{words} {_args(recorded[key])}, now {_args(now[key])}")
            else:
                out.append(f"{words} {str(recorded[key])[:16]}, now {str(now[key])[:16]}")
    return out


def _args(value: Any) -> str:
    """Server flags in words: as a command line would show them, ``none`` for none."""
    if not value:
        return "none"
    if not isinstance(value, list):
        return str(value)[:60]
    shown = " ".join(str(arg) for arg in value)
    return shown if len(shown) <= 60 else shown[:57] + "..."

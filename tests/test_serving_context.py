"""Serving context: what one request can hold is set explicitly (unified KV cache) and fingerprinted."""

from __future__ import annotations

import subprocess

import pytest

from metrobench.errors import MetrobenchError
from metrobench.agents.runner.config import ModelConfig, Serving
from metrobench.agents.serving import ServerConfig, command, find_llama_server


def test_slot_context_is_all_of_n_ctx_with_a_unified_kv_cache():
    assert Serving(n_ctx=32768, parallel=2).slot_ctx == 32768            # the default: unified
    assert Serving(n_ctx=32768, parallel=2, kv_unified=False).slot_ctx == 16384
    assert Serving(n_ctx=32768, parallel=2, kv_unified=False, server="llama_cpp.server").slot_ctx == 32768


def test_slot_context_is_in_the_fingerprint_of_served_models_only():
    assert ModelConfig(name="m").fingerprint() == "ecb167c3025aa52b"     # no serving: no slot_ctx
    unified = ModelConfig(name="m", serving={"gguf": "a.gguf", "n_ctx": 32768, "parallel": 2})
    split = ModelConfig(name="m", serving={"gguf": "a.gguf", "n_ctx": 32768, "parallel": 2, "kv_unified": False})
    assert unified.fingerprint() != split.fingerprint()


def test_a_unified_kv_cache_is_asked_of_the_vendored_llama_server(tmp_path):
    try:
        binary = find_llama_server()
    except MetrobenchError as exc:  # a core-only install: no llama.cpp
        pytest.skip(str(exc))
    cmd = command(ServerConfig(tmp_path / "m.gguf", binary=str(binary), parallel=2, kv_unified=True), 8123)
    assert "--kv-unified" in cmd
    assert "--kv-unified" not in command(ServerConfig(tmp_path / "m.gguf", binary=str(binary), kv_unified=False), 8123)
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    assert "--kv-unified" in help_text.stdout + help_text.stderr

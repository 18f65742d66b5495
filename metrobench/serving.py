"""Starting and stopping a llama.cpp server for one GGUF model.

:func:`llama_server` starts ``llama_cpp.server`` (llama-cpp-python) by default,
or a ``llama-server`` binary when one is named, on 127.0.0.1 and a free port;
waits until it answers; yields the OpenAI-compatible base URL; and always
stops it again — on success, on error and on Ctrl-C — so a benchmark job
never leaves a server holding the GPU.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from metrobench.errors import MetrobenchError


@dataclass
class ServerConfig:
    """How to serve one model."""

    model_path: Path
    alias: str = "local"
    n_ctx: int = 4096
    chat_format: str | None = None     # llama_cpp.server: e.g. "chatml-function-calling"
    n_threads: int | None = None
    binary: str | None = None          # a llama-server executable; None = llama_cpp.server
    parallel: int = 1                  # llama-server slots
    flash_attn: bool = False
    n_gpu_layers: int = 0
    extra_args: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def packaged_gguf(package: str) -> Path:
    """The ``.gguf`` file shipped inside a PyPI package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MetrobenchError(f"package {package} is not installed (pip install {package.replace('_', '-')})")
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            return found[0]
    raise MetrobenchError(f"package {package} holds no .gguf file")


def command(cfg: ServerConfig, port: int) -> list[str]:
    """The server's command line."""
    if cfg.binary:
        cmd = [cfg.binary, "--model", str(cfg.model_path), "--host", "127.0.0.1", "--port", str(port),
               "--alias", cfg.alias, "--ctx-size", str(cfg.n_ctx), "--parallel", str(cfg.parallel),
               "--n-gpu-layers", str(cfg.n_gpu_layers), "--jinja"]
        if cfg.flash_attn:
            cmd += ["--flash-attn", "on"]
        if cfg.n_threads:
            cmd += ["--threads", str(cfg.n_threads)]
    else:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(cfg.model_path),
               "--model_alias", cfg.alias, "--host", "127.0.0.1", "--port", str(port),
               "--n_ctx", str(cfg.n_ctx), "--n_gpu_layers", str(cfg.n_gpu_layers)]
        if cfg.chat_format:
            cmd += ["--chat_format", cfg.chat_format]
        if cfg.n_threads:
            cmd += ["--n_threads", str(cfg.n_threads)]
    return cmd + list(cfg.extra_args)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@contextmanager
def llama_server(cfg: ServerConfig, *, log_path: Path | None = None,
                 startup_timeout: float = 300.0) -> Iterator[str]:
    """Serve ``cfg`` and yield its base URL (``http://127.0.0.1:PORT/v1``)."""
    if not Path(cfg.model_path).is_file():
        raise MetrobenchError(f"{cfg.model_path}: no such model file")
    port = free_port()
    log_path = Path(log_path) if log_path else Path(os.devnull)
    if log_path != Path(os.devnull):
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command(cfg, port), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise MetrobenchError(f"llama.cpp server for {cfg.model_path} exited with status "
                                      f"{proc.returncode} during start-up\n{_tail(log_path)}")
            try:
                if httpx.get(f"{base}/v1/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise MetrobenchError(f"llama.cpp server for {cfg.model_path} did not answer within "
                                      f"{startup_timeout:.0f} s\n{_tail(log_path)}")
            time.sleep(0.2)
        yield f"{base}/v1"
    finally:
        _stop(proc)


@contextmanager
def serve_model(cfg, *, log_path: Path | None = None) -> Iterator[str | None]:
    """Serve a :class:`~metrobench.runner.config.ModelConfig` if it has a ``serving`` block.

    Yields the base URL (``None`` when the model is not served here: a hosted
    API or a server started elsewhere, reached through ``base_url``).
    """
    serving = cfg.serving
    if serving is None:
        yield None
        return
    if serving.gguf:
        model_path = Path(serving.gguf)
    elif serving.gguf_package:
        model_path = packaged_gguf(serving.gguf_package)
    else:
        raise MetrobenchError(f"model {cfg.name}: serving needs gguf or gguf_package")
    server = ServerConfig(model_path=model_path, alias=cfg.served_model, n_ctx=serving.n_ctx,
                          chat_format=serving.chat_format, n_threads=serving.n_threads,
                          binary=serving.binary, parallel=serving.parallel,
                          flash_attn=serving.flash_attn, n_gpu_layers=serving.n_gpu_layers,
                          extra_args=list(serving.extra_args))
    with llama_server(server, log_path=log_path) as url:
        yield url

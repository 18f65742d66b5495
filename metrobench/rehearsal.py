"""The dress rehearsal: the paper config's whole DAG on a CPU, only its heavy parts swapped.

``python -m metrobench.rehearsal`` (``make rehearsal``) runs, in its own folder
(default ``results-rehearsal/``; the user's ``results/`` is never touched):

1. the workflow's files copied there fresh (no results, no ``.snakemake`` state);
2. one tiny random-weight Qwen3.5 made by the project's chain
   (:func:`metrobench.training.base.tiny_qwen3_5`, Qwen3.5's own chat template,
   ``convert_hf_to_gguf``), kept under ``rehearsal/tiny/`` between rehearsals;
3. the stand-ins (:mod:`metrobench.standins`) on the ports ``config/rehearsal.yaml``
   names: the hub serving that model under every GGUF and base the paper config
   downloads, and one endpoint answering Mistral, Azure chat, Azure Responses and
   the Anthropic judge in their wire formats (trivial answers, keys checked);
4. the llama.cpp builds the config names (b8642, b10398), made by ``make builds``'
   own path (:mod:`metrobench.agents.llama_builds`) from the vendored tree in their
   place (``LLAMA_CPP_SOURCE=vendored``: the default build's files, nothing compiled)
   into ``rehearsal/llama-builds/`` (``METROBENCH_LLAMA_BUILDS``, which the jobs
   inherit: a real build of those names in the venv is never overwritten), then
   ``metrobench doctor``'s named-build checks on them (a warning each: the vendored
   tree, not the tag);
5. ``metrobench lock`` against the hub stand-in (``HF_ENDPOINT``), then
   ``snakemake <every report target>`` on ``config/config.yaml`` + the overlay,
   then ``snakemake --report``;
6. a summary: the wall time of each phase, per stage the jobs and seconds
   Snakemake's ``benchmark:`` files under ``results/benchmarks/`` recorded, the most
   GPU jobs that ran at once (:func:`gpu_jobs_at_once`, from Snakemake's log), and
   the builds the runs' serving records name (a run on no named build fails it), and
   the llama.cpp that converted and quantised each student (``gguf_sizes.json``: the
   build that serves it, else the rehearsal fails).

GPU jobs (a served row, a training) run ``--gpu-jobs`` at a time (Snakemake's ``gpu``
resource; default ``--cores``): 2 runs two small rows side by side, as ``profiles/packed``
lets the card do; 1 runs each alone, as ``profiles/default``. The tables are the same either
way but for their wall-clock columns (issue 53: the two rehearsals compared).

Exit status: 0 when every target and the report were written; else the failing
phase's status, with one ``metrobench: error:`` line naming it and its log.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from metrobench import layout
from metrobench.errors import MetrobenchError
from metrobench.study import load_study, merge_sources, read_sources

REPO = Path(__file__).resolve().parents[1]
OVERLAY = "config/rehearsal.yaml"
PAPER = "config/config.yaml"
WORKFLOW_FILES = ("Snakefile", "workflow", "config", "peft", "profiles")
#: The dummy keys the hosted rows and the judge read (the stand-ins check they arrive).
KEYS = {"MISTRAL_API_KEY": "rehearsal-mistral", "AZURE_OPENAI_API_KEY": "rehearsal-azure",
        "ANTHROPIC_API_KEY": "rehearsal-anthropic"}
COMMIT = "5e4ea25a1c0f2e6b9d3c7a8f01b2c3d4e5f60718"   # the stand-in hub's one commit
#: The rehearsal's named llama.cpp builds (the vendored tree under the config's names), in its folder.
BUILDS = "rehearsal/llama-builds"
HOSTED_REPLY = "I am sorry, I cannot help with that journey."
JUDGE_REPLY = "Score: 1 | rehearsal stand-in"


def workflow_copy(workdir: Path) -> None:
    """The workflow's files in ``workdir``, fresh: earlier results, logs, state and lock removed."""
    for name in (*WORKFLOW_FILES, "results", "logs", ".snakemake", "models", "rehearsal/models.lock.yaml",
                 "rehearsal/hf-home", BUILDS):
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, workdir / name, ignore=shutil.ignore_patterns("__pycache__", "models.lock.yaml"))
        else:
            shutil.copy(source, workdir / name)


def tiny_model(folder: Path) -> tuple[Path, Path]:
    """The tiny random Qwen3.5 (HF folder, GGUF) under ``folder``, made once by the project's chain."""
    hf, gguf = folder / "hf", folder / "tiny-qwen3.5-f16.gguf"
    if gguf.is_file() and (hf / "model.safetensors").is_file():
        return hf, gguf
    from transformers import AutoTokenizer

    from metrobench.training.base import tiny_qwen3_5
    from metrobench.agents.chat_template import chat_template
    from metrobench.training.export import convert_to_gguf

    shutil.rmtree(hf, ignore_errors=True)
    tiny_qwen3_5(hf, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(hf)
    tokenizer.chat_template = chat_template("qwen3.5").serving   # as the paper's students carry it
    tokenizer.save_pretrained(hf)
    convert_to_gguf(hf, gguf)
    return hf, gguf


def hub_repos(study: Any, hf: Path, gguf: Path) -> dict[str, dict[str, bytes]]:
    """Every repo the config downloads, holding the tiny model: its GGUF under each file name, its folder for bases."""
    data = gguf.read_bytes()
    repos: dict[str, dict[str, bytes]] = defaultdict(dict)
    for entry in study.downloads.gguf.values():
        repos[entry.repo][entry.file] = data
    folder = {p.name: p.read_bytes() for p in sorted(hf.iterdir()) if p.is_file()}
    for repo in study.downloads.bases:
        repos[repo].update(folder)
    return dict(repos)


def _deployment(path: str) -> str | None:
    match = re.match(r"^/openai/deployments/([^/]+)/(chat/completions|responses)$", path)
    return match.group(1) if match else None


def api_answer(request: dict) -> tuple[int, Any, dict[str, str]]:
    """One hosted or judge request answered in its own wire format, after its key is checked."""
    from metrobench.standins.openai_api import chat_payload, responses_payload

    path, headers, body = request["path"], request["headers"], request["body"]
    if path == "/v1/messages":
        key = KEYS["ANTHROPIC_API_KEY"]
        if key not in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")):
            return 401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, {}
        return 200, {"id": "msg_rehearsal", "type": "message", "role": "assistant", "model": body.get("model"),
                     "content": [{"type": "text", "text": JUDGE_REPLY}], "stop_reason": "end_turn",
                     "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 8}}, {}
    if path == "/v1/chat/completions":          # Mistral's chat completions
        if headers.get("authorization") != f"Bearer {KEYS['MISTRAL_API_KEY']}":
            return 401, {"message": "Unauthorized", "request_id": "rehearsal"}, {}
        return 200, chat_payload(HOSTED_REPLY), {}
    if _deployment(path):                       # Azure: chat completions or Responses
        if headers.get("api-key") != KEYS["AZURE_OPENAI_API_KEY"] or "api-version" not in request["query"]:
            return 401, {"error": {"code": "401", "message": "Access denied: invalid key or no api-version"}}, {}
        if path.endswith("/responses"):
            return 200, responses_payload(HOSTED_REPLY, reasoning="rehearsal"), {}
        return 200, chat_payload(HOSTED_REPLY), {}
    return 404, {"error": {"code": "404", "message": f"no such path {path}"}}, {}


def stand_in_answers(requests: list[dict]) -> str:
    """What the API stand-in answered, by wire format and deployment (reasoning efforts seen)."""
    counts: Counter[str] = Counter()
    for request in requests:
        path, body = request["path"], request["body"]
        if path == "/v1/messages":
            counts["anthropic messages (judge)"] += 1
        elif path == "/v1/chat/completions":
            counts[f"mistral chat {body.get('model')}"] += 1
        elif _deployment(path):
            kind = "responses" if path.endswith("/responses") else "chat"
            effort = (body.get("reasoning") or {}).get("effort") or body.get("reasoning_effort")
            counts[f"azure {kind} {_deployment(path)} effort={effort}"] += 1
        else:
            counts[f"other {path}"] += 1
    return "\n".join(f"  {n:6d}  {what}" for what, n in sorted(counts.items()))


@contextmanager
def standins(study: Any, ports: dict[str, int], hf: Path, gguf: Path) -> Iterator[tuple[Any, Any]]:
    """The hub and API stand-ins, serving on the overlay's ports for the duration."""
    from metrobench.standins.hf_hub import FakeHub
    from metrobench.standins.openai_api import FakeOpenAI

    with ExitStack() as stack:
        try:
            hub = stack.enter_context(FakeHub(hub_repos(study, hf, gguf), COMMIT, port=ports["hub_port"],
                                              cdn_port=ports["cdn_port"]))
            api = stack.enter_context(FakeOpenAI(api_answer, port=ports["api_port"]))
        except OSError as exc:
            raise MetrobenchError(f"{OVERLAY}: x-rehearsal: a stand-in's port is taken ({exc.strerror}): "
                                  f"stop what holds it or change the ports there") from None
        yield hub, api


def environment(workdir: Path, hub_url: str) -> dict[str, str]:
    """The jobs' environment: the venv first on PATH, the hub stand-in, private caches, dummy keys."""
    env = dict(os.environ, **KEYS)
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", HF_ENDPOINT=hub_url,
               HF_HOME=str(workdir / "rehearsal" / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
               METROBENCH_CACHE=str(workdir / "rehearsal" / "cache"), TOKENIZERS_PARALLELISM="false",
               METROBENCH_LLAMA_BUILDS=str(workdir / BUILDS))
    # The paper recipes say cuda_training: true; here their bases are tiny stand-ins, trained on the CPU.
    env["METROBENCH_ALLOW_CPU_TRAINING"] = "1"   # = `metrobench train --allow-cpu`
    env.pop("HF_HUB_OFFLINE", None)
    return env


def run_phase(name: str, command: list[str], workdir: Path, env: dict[str, str], log: Path,
              progress: bool = False) -> float:
    """Run one phase, its output to ``log`` (Snakemake's progress lines also shown); its wall seconds."""
    start = time.monotonic()
    print(f"rehearsal: {name}: {' '.join(command[:6])}{' ...' if len(command) > 6 else ''}", flush=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        assert proc.stdout is not None
        shown = -1
        for line in proc.stdout:
            out.write(line)
            step = re.search(r"(\d+) of (\d+) steps \((\d+)%\) done", line)
            if progress and step and int(step.group(3)) // 10 > shown:   # every tenth of the plan
                shown = int(step.group(3)) // 10
                print(f"  {line.rstrip()} ({time.monotonic() - start:.0f} s)", flush=True)
            elif progress and re.match(r"(Error in rule|metrobench: error)", line):
                print(f"  {line.rstrip()}", flush=True)
        status = proc.wait()
    if status != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        print(tail, file=sys.stderr)
        raise PhaseFailed(status, f"rehearsal phase {name} failed (exit {status}); its log: {log}")
    return time.monotonic() - start


class PhaseFailed(MetrobenchError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def stage_of(path: Path, root: Path) -> str:
    """A benchmark file's stage: its first folder under results/benchmarks/, and the step for peft."""
    parts = path.relative_to(root).parts
    if parts[0] == "peft":
        return f"peft {path.stem}"
    return parts[0]


def stage_times(root: Path) -> dict[str, tuple[int, float, float]]:
    """Per stage: (jobs, seconds summed, longest job) from Snakemake's benchmark files."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for path in sorted(root.rglob("*.tsv")):
        with open(path) as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        if rows and rows[0].get("s"):
            seconds[stage_of(path, root)].append(float(rows[0]["s"]))
    return {stage: (len(v), sum(v), max(v)) for stage, v in sorted(seconds.items())}


def rehearsal_summary(phases: dict[str, float], stages: dict[str, tuple[int, float, float]], api: str) -> str:
    lines = ["rehearsal: time per phase (wall s):"]
    lines += [f"  {seconds:8.1f}  {name}" for name, seconds in phases.items()]
    lines.append("rehearsal: time per stage (Snakemake benchmark files: jobs, job-seconds summed, longest job):")
    lines += [f"  {stage:22s} {jobs:4d} jobs {total:8.1f} s  (longest {longest:.1f} s)"
              for stage, (jobs, total, longest) in stages.items()]
    lines.append("rehearsal: requests the API stand-in answered:")
    lines.append(api or "  none")
    return "\n".join(lines)


def gpu_jobs_at_once(log: str) -> int:
    """The most jobs holding the ``gpu`` resource that were running at once, read from Snakemake's log
    line by line: a job starts at its block's ``resources: ... gpu=1`` (after its ``jobid: N``) and
    ends at ``Finished jobid: N``."""
    running: set[str] = set()
    most, block_job = 0, None
    for line in log.splitlines():
        if started := re.match(r"\s+jobid: (\d+)$", line):
            block_job = started.group(1)
        elif block_job and re.match(r"\s+resources: .*\bgpu=[1-9]", line):
            running.add(block_job)
            most = max(most, len(running))
        elif finished := re.match(r"Finished jobid: (\d+)\b", line):
            running.discard(finished.group(1))
        if not line.strip():
            block_job = None
    return most


def build_checks(study: Any) -> str:
    """``metrobench doctor``'s named-build lines for the builds just installed; a FAIL stops the rehearsal."""
    from metrobench.doctor import check_named_builds

    checks = check_named_builds(study)
    failed = [c for c in checks if c.status == "FAIL"]
    if failed:
        raise PhaseFailed(1, f"rehearsal: named build check failed: {failed[0].name}: {failed[0].detail}")
    return "\n".join(f"  {c.line()}" for c in checks)


def served_builds(results: Path) -> dict[str, int]:
    """The llama.cpp builds the work transcripts' serving records name (:func:`build_label`), with their
    transcript counts; a transcript served on the default build counts under ``default``."""
    import json

    from metrobench.agents.serving_record import build_label
    from metrobench.transcripts.records import read_header

    counts: Counter[str] = Counter()
    for path in sorted((results / "work").glob("*/*.jsonl")):
        header = read_header(path)
        if header is not None:
            serving = header.serving or {}
        else:  # a transcript from before the run header: its first record's stamp
            with open(path) as handle:
                first = handle.readline().strip()
            serving = (json.loads(first).get("meta") or {} if first else {}).get("serving") or {}
        build = serving.get("build")
        if isinstance(build, dict):
            counts[build_label(build) if build.get("name") else "default"] += 1
    return dict(sorted(counts.items()))


def converted_by(results: Path) -> dict[str, str]:
    """Per student seed folder (``peft/<size>/seed<n>``), the llama.cpp its ``gguf_sizes.json`` names."""
    import json

    from metrobench.training.export import LLAMA_CPP_KEY

    return {str(path.parent.relative_to(results)): json.loads(path.read_text()).get(LLAMA_CPP_KEY) or "-"
            for path in sorted(results.glob("peft/*/seed*/gguf_sizes.json"))}


def targets_of(workdir: Path) -> tuple[Any, dict[str, int], list[str]]:
    """The merged study, the stand-ins' ports (x-rehearsal) and every report target."""
    paths = [workdir / PAPER, workdir / OVERLAY]
    study = load_study(paths)
    ports = merge_sources(read_sources(paths)).get("x-rehearsal") or {}
    missing = [k for k in ("api_port", "hub_port", "cdn_port") if not isinstance(ports.get(k), int)]
    if missing:
        raise MetrobenchError(f"{OVERLAY}: x-rehearsal: give {missing[0]} (a port on 127.0.0.1)")
    return study, ports, [layout.result(target, study.results) for target in study.report_targets()]


def rehearse(workdir: Path, data: Path, cores: int, gpu_jobs: int | None = None) -> str:
    """The whole rehearsal in ``workdir``; the summary text (raises PhaseFailed on a failed phase)."""
    gpu_jobs = gpu_jobs or cores
    phases: dict[str, float] = {}
    start = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    workflow_copy(workdir)
    (workdir / "rehearsal").mkdir(exist_ok=True)
    study, ports, targets = targets_of(workdir)
    os.environ["METROBENCH_CACHE"] = str(workdir / "rehearsal" / "cache")
    hf, gguf = tiny_model(workdir / "rehearsal" / "tiny")
    phases["copy and tiny Qwen3.5 (cached after the first)"] = time.monotonic() - start
    python = sys.executable
    with standins(study, ports, hf, gguf) as (hub, api):
        env = environment(workdir, hub.url)
        configs = [PAPER, OVERLAY]
        logs = workdir / "rehearsal"
        os.environ["METROBENCH_LLAMA_BUILDS"] = env["METROBENCH_LLAMA_BUILDS"]
        phases["llama.cpp builds (the vendored tree under the config's names)"] = run_phase(
            "builds", [python, "-m", "metrobench", "builds", *[a for c in configs for a in ("--config", c)],
                       "--venv", sys.prefix], workdir, dict(env, LLAMA_CPP_SOURCE="vendored"), logs / "builds.log")
        checked = build_checks(study)
        phases["metrobench lock (hub stand-in)"] = run_phase(
            "lock", [python, "-m", "metrobench", "lock", *[a for c in configs for a in ("--config", c)]],
            workdir, env, logs / "lock.log")
        # (the targets first: --configfile and --config take every word after them)
        snake = [python, "-m", "snakemake", *targets, "--cores", str(cores), "--configfile", *configs,
                 "--resources", f"gpu={gpu_jobs}", "--scheduler", "greedy", "--config", f"data={{path: {data}, commit: {study.data.commit}}}"]
        phases["snakemake: every paper target"] = run_phase(
            "snakemake", snake, workdir, env, logs / "snakemake.log", progress=True)
        phases["snakemake --report"] = run_phase(
            "report", [*snake[:3], "--report", "results/report.html", *snake[3:]], workdir, env, logs / "report.log")
        answered = stand_in_answers(api.requests)
    phases["total"] = time.monotonic() - start
    missing = [t for t in [*targets, "results/report.html"] if not (workdir / t).exists()]
    if missing:
        raise PhaseFailed(1, f"rehearsal: snakemake ended without {missing[0]}")
    builds = served_builds(workdir / "results")
    if not any(label != "default" for label in builds):
        raise PhaseFailed(1, "rehearsal: no run's serving record names a named llama.cpp build")
    students = converted_by(workdir / "results")
    converter = study.student_converter_build()
    wrong = [seed for seed, made in students.items() if converter and not made.startswith(f"{converter} ")]
    if not students or wrong:
        raise PhaseFailed(1, f"rehearsal: {wrong[0]} was not converted by the build that serves it ({converter}): "
                             f"{students[wrong[0]]}" if wrong else "rehearsal: no student GGUF was made")
    at_once = gpu_jobs_at_once((logs / "snakemake.log").read_text())
    return "\n".join([rehearsal_summary(phases, stage_times(workdir / "results" / "benchmarks"), answered),
                      f"rehearsal: GPU jobs at most {at_once} at once (gpu={gpu_jobs}; Snakemake's log)",
                      "rehearsal: the named builds (doctor's checks):", checked,
                      "rehearsal: builds the runs' serving records name (work transcripts):",
                      *[f"  {n:6d}  {label}" for label, n in builds.items()],
                      "rehearsal: the llama.cpp that converted and quantised each student (gguf_sizes.json):",
                      *[f"  {seed}: {made}" for seed, made in students.items()]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrobench.rehearsal", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="results-rehearsal", help="the rehearsal's folder (made fresh)")
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA", "../shared/metrollm-bench"),
                        help="the benchmark root (default: $METROBENCH_DATA, else ../shared/metrollm-bench)")
    parser.add_argument("--cores", type=int, default=2, help="Snakemake's --cores")
    parser.add_argument("--gpu-jobs", type=int, default=None,
                        help="GPU jobs at once (Snakemake's gpu resource; default --cores): 1 runs each alone")
    args = parser.parse_args(argv)
    data = Path(args.data).resolve()
    try:
        if not data.is_dir():
            raise MetrobenchError(f"--data {args.data}: no such benchmark root")
        print(rehearse(Path(args.workdir).resolve(), data, args.cores, args.gpu_jobs), flush=True)
    except MetrobenchError as exc:  # a failed phase exits with that phase's status
        print(f"metrobench: error: {exc}", file=sys.stderr)
        return exc.status if isinstance(exc, PhaseFailed) else 1
    print(f"rehearsal: every paper target and the report written under {args.workdir}/results")
    return 0


if __name__ == "__main__":
    sys.exit(main())

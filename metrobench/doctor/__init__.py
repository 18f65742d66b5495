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

One module per concern, each taking :class:`~metrobench.doctor.needs.StudyNeeds`:
:mod:`~metrobench.doctor.needs` (the needs and the report line), :mod:`~metrobench.doctor.packages`,
:mod:`~metrobench.doctor.llama`, :mod:`~metrobench.doctor.gpu`, :mod:`~metrobench.doctor.memory`,
:mod:`~metrobench.doctor.inputs`; this package runs them in the report's order (:func:`run_checks`)
and re-exports their checks.
"""

from __future__ import annotations

from pathlib import Path

from metrobench.doctor.gpu import check_gpu_fit, check_torch, check_training_path, fla_refusal
from metrobench.doctor.inputs import check_data, check_keys, check_lock, check_models, load_config, unreadable_ggufs
from metrobench.doctor.llama import (RISKY_FEATURES, build_gpu_check, build_version_check, check_llama_cpp,
                                     check_llama_server, check_named_builds, compiled_features)
from metrobench.doctor.memory import (MIN_FREE_GB, check_disk, check_memory, check_plan_disk, check_training_memory,
                                      free_disk_gb, free_ram_gb, plan_needs, training_peak_gb)
from metrobench.doctor.needs import Check, StudyNeeds, read_needs
from metrobench.doctor.packages import PACKAGES, check_python, check_stack, package_version

__all__ = ["MIN_FREE_GB", "PACKAGES", "RISKY_FEATURES", "Check", "StudyNeeds", "build_gpu_check",
           "build_version_check", "check_data", "check_disk", "check_gpu_fit", "check_keys", "check_llama_cpp",
           "check_llama_server", "check_lock", "check_memory", "check_models", "check_named_builds",
           "check_plan_disk", "check_python", "check_stack", "check_torch", "check_training_memory",
           "check_training_path", "compiled_features", "fla_refusal", "free_disk_gb", "free_ram_gb", "load_config",
           "main", "package_version", "plan_needs", "read_needs", "run_checks", "training_peak_gb",
           "unreadable_ggufs"]


def run_checks(paths: list[str], *, data: str | None, results: Path) -> list[Check]:
    """Every check, in the report's order; the config's own check first."""
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
    """Print the report; 1 when a check fails (the configured study cannot run here)."""
    checks = run_checks(paths, data=data, results=results)
    for check in checks:
        print(check.line(), flush=True)
    failed = [c for c in checks if c.status == "FAIL"]
    print(f"{len(failed)} problem(s): the configured study cannot run here" if failed
          else "ready: the configured study can run here")
    return 1 if failed else 0

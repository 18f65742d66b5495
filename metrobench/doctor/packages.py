"""Python and its packages: the versions each stage needs (:func:`check_python`) and the installed
packages against the locked stack, ``constraints/stack.txt`` (:func:`check_stack`; the gated-delta
kernels are left to :func:`metrobench.doctor.gpu.check_training_path`).
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from metrobench.doctor.needs import Check


PACKAGES = ("metrobench", "pydantic", "networkx", "pyarrow", "pandas", "snakemake", "openai",
            "anthropic", "llama_cpp_python", "torch", "transformers", "peft", "trl", "bitsandbytes")


def package_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python() -> list[Check]:
    ok = sys.version_info >= (3, 11)
    checks = [Check("ok" if ok else "FAIL", "python", f"{sys.version.split()[0]} ({sys.executable})")]
    versions = {p: package_version(p) for p in PACKAGES}
    found = [f"{p}={v}" for p, v in versions.items() if v]
    missing = [p for p, v in versions.items() if not v]
    detail = " ".join(found) + (f"; not installed: {', '.join(missing)}" if missing else "")
    checks.append(Check("ok", "packages", detail))
    return checks


#: The packages of the ``train-cuda`` extra (and flash-linear-attention's core and einops): Qwen3.5's
#: gated-delta kernels, installed only where they build (``make install TRAIN_CUDA=1``), so
#: their absence is :func:`check_training_path`'s to report, not drift.
GATED_DELTA_KERNELS = ("flash-linear-attention", "fla-core", "causal-conv1d", "einops")


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

    checkout = checkout or Path(__file__).resolve().parents[2]   # metrobench/doctor/ -> the checkout
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

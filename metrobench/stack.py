"""The locked Python stack: the constraints file ``make install`` installs from, and drift from it.

``constraints/stack.txt`` pins every package of the project's environment (the
training and serving stack: torch, transformers, TRL, PEFT, bitsandbytes,
accelerate, datasets, tokenizers, safetensors, huggingface_hub, gguf,
llama-cpp-python, snakemake, numpy, pandas, pyarrow, pydantic, and what they pull
in) at the versions CI and the dress rehearsal ran, so a workstation installing on
a later day trains and serves with the same code. pip reads it with ``-c``; this
module reads it for ``metrobench doctor``:

* :func:`read_pins` — one :class:`Pin` a package, in file order. A line that is
  not a requirement, an option line, or a package named twice (by its normalised
  name: ``Llama_CPP.python`` is ``llama-cpp-python``) is a :class:`MetrobenchError`
  naming the file and line, since pip would refuse or silently pick one of them.
* :func:`drift` — each pin this machine does not meet: installed at another
  version, or not installed. A pin whose environment marker excludes this machine
  is left out. Versions compare as pip compares them: ``torch==2.13.0`` is met by
  ``2.13.0+cpu`` and ``2.13.0+cu130`` (a local label is ignored unless the pin has one).
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

from metrobench.errors import MetrobenchError

#: The stack's constraints file, relative to the checkout (the Makefile's PIP line reads it).
CONSTRAINTS = Path("constraints") / "stack.txt"


@dataclass(frozen=True)
class Pin:
    name: str        # normalised (PEP 503): lower case, runs of -_. as one -
    spec: str        # the version specifier as written, e.g. ``==2.13.0``
    line: int
    applies: bool    # the line's environment marker holds here (True without one)


@dataclass(frozen=True)
class Drift:
    name: str
    spec: str
    installed: str | None   # None: not installed

    def phrase(self) -> str:
        return f"{self.name} {self.installed} (pinned {self.spec})" if self.installed else self.name


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> list[Pin]:
    """The pins of a constraints file, in file order; a bad or repeated line is one error."""
    from packaging.requirements import InvalidRequirement, Requirement

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetrobenchError(f"{path}: cannot read the constraints file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise MetrobenchError(f"{path}: not UTF-8 text") from None
    pins: list[Pin] = []
    first: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()   # pip's comments: # at the start or after a space
        if not line:
            continue
        if line.startswith("-"):
            raise MetrobenchError(f"{path}: line {number}: {line!r}: only pins belong here (name==version), "
                                  "no pip options")
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise MetrobenchError(f"{path}: line {number}: {line!r} is not a pin ({exc})") from None
        name = canonical_name(requirement.name)
        if name in first:
            raise MetrobenchError(f"{path}: line {number}: {name} is pinned twice (first on line {first[name]}); "
                                  "keep one")
        if requirement.extras or requirement.url or not str(requirement.specifier):
            raise MetrobenchError(f"{path}: line {number}: {line!r}: a pin is a name and a version "
                                  "(name==version), without extras or a URL")
        first[name] = number
        applies = requirement.marker.evaluate() if requirement.marker is not None else True
        pins.append(Pin(name, str(requirement.specifier), number, applies))
    return pins


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def drift(pins: list[Pin], version_of=installed_version) -> list[Drift]:
    """The pins (of those that apply here) this environment does not meet, in file order."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    out = []
    for pin in pins:
        if not pin.applies:
            continue
        version = version_of(pin.name)
        try:
            met = version is not None and SpecifierSet(pin.spec).contains(Version(version), prereleases=True)
        except InvalidVersion:
            met = False
        if not met:
            out.append(Drift(pin.name, pin.spec, version))
    return out

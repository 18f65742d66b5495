"""Named llama.cpp builds: which ones a study config serves on, and ``make builds`` making them.

A model row may name a llama.cpp build (``serving.build: b8642``: the paper served its rows on
b8642 and b10398). ``StudyConfig.llama_builds`` lists the builds a config names and the rows on
each (:class:`BuildUse`); ``metrobench builds`` (``make builds``) builds each from its tag with
``scripts/install-llama-cpp.sh`` into the folder ``serving.build`` is looked up in
(:func:`metrobench.agents.serving.builds_dir`), with the configured ``LLAMA_CMAKE_ARGS``.

Where the source comes from (:func:`source_tree`), per build NAME:

* ``LLAMA_CPP_SOURCE=vendored``: the llama.cpp tree vendored in llama-cpp-python, installed
  under NAME (no compile: the default build's folder is reused) and recorded as the vendored
  tree, not as tag NAME: the rehearsal's stand-in for the paper's builds;
* ``LLAMA_CPP_SOURCE=PATH``, a llama.cpp git repository holding tag NAME: the checkout itself
  when it is clean and at the tag, else a local clone of it at the tag under
  ``build/llama.cpp/src/NAME`` (the user's checkout is never moved);
* nothing: a shallow clone (``--depth 1 --branch NAME``) of ``$LLAMA_CPP_REPO``, by default the
  public repository, under ``build/llama.cpp/src/NAME``.

A build already installed from its tag with the same ``LLAMA_CMAKE_ARGS`` is left as it is
(``--force`` builds it again). Bad input (no such checkout, no such tag, a failed build) is one
``metrobench: error:`` line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.agents.runner.config import Serving

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install-llama-cpp.sh"
UPSTREAM = "https://github.com/ggml-org/llama.cpp"
#: The repository a build is cloned from when no checkout is given.
REPO_ENV = "LLAMA_CPP_REPO"
SOURCE_ENV = "LLAMA_CPP_SOURCE"


@dataclass
class BuildUse:
    """One named build and the rows a config serves on it."""

    name: str
    rows: dict[str, Serving] = field(default_factory=dict)   # model (or "student_serving") -> its serving

    @property
    def gpu_rows(self) -> list[str]:
        """Rows that put layers on the GPU."""
        return [row for row, s in self.rows.items() if s.n_gpu_layers > 0]

    @property
    def strict_gpu_rows(self) -> list[str]:
        """Rows that put layers on the GPU and do not allow the CPU (``serving.allow_cpu``)."""
        return [row for row, s in self.rows.items() if s.n_gpu_layers > 0 and not s.allow_cpu]


def work_dir() -> Path:
    """The install script's work folder (``$LLAMA_CPP_WORK``, else ``build/llama.cpp`` in the checkout)."""
    return Path(os.environ.get("LLAMA_CPP_WORK") or REPO / "build" / "llama.cpp")


def _git(*args: str, cwd: Path | None = None) -> str | None:
    """A git command's output (stripped), or None when it fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def tag_commit(repo: Path, tag: str) -> str | None:
    """The commit tag ``tag`` names in the git repository ``repo`` (a work tree or a bare one)."""
    return _git("-C", str(repo), "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}")


def _at_tag(tree: Path, tag: str) -> bool:
    """``tree`` is a git checkout of its own, clean, with HEAD at the commit of ``tag``."""
    if _git("-C", str(tree), "rev-parse", "--show-toplevel") != str(tree.resolve()):
        return False
    commit = tag_commit(tree, tag)
    return commit is not None and _git("-C", str(tree), "rev-parse", "HEAD") == commit and \
        _git("-C", str(tree), "status", "--porcelain", "--untracked-files=no") == ""


def clone(url: str, tag: str, dest: Path, *, shallow: bool) -> Path:
    """``url`` cloned at ``tag`` into ``dest`` (a clone already there at the tag is kept)."""
    if dest.exists() and _at_tag(dest, tag):
        return dest
    partial = dest.with_name(dest.name + ".partial")
    for path in (dest, partial):      # this module's own clones (build/llama.cpp/src), never a user's tree
        shutil.rmtree(path, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    depth = ["--depth", "1"] if shallow else []
    print(f"== cloning {url} at {tag}{' (shallow)' if shallow else ''} into {dest}", flush=True)
    done = subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "--quiet", *depth,
                           "--branch", tag, url, str(partial)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise MetrobenchError(f"llama.cpp build {tag}: cloning {url} at tag {tag} failed: {last}")
    partial.rename(dest)
    return dest


def source_tree(name: str, source: str | None, work: Path, repo_url: str = UPSTREAM) -> str:
    """The source tree to build ``name`` from (the module docstring): ``vendored``, or a folder at tag ``name``."""
    if source == "vendored":
        return "vendored"
    dest = work / "src" / name
    if not source:
        return str(clone(repo_url, name, dest, shallow=True))
    path = Path(source).expanduser()
    if not path.is_dir():
        raise MetrobenchError(f"{SOURCE_ENV}={source}: no such folder (a llama.cpp git checkout, or vendored)")
    if tag_commit(path, name) is None:
        raise MetrobenchError(f"{SOURCE_ENV}={source}: no tag {name} there (not a llama.cpp git repository, "
                              f"or the tag not fetched: git -C {source} fetch origin tag {name})")
    if _at_tag(path, name):
        return str(path.resolve())
    return str(clone(str(path.resolve()), name, dest, shallow=False))


def installed_record(name: str) -> dict[str, Any] | None:
    """The install record of the named build ``name``, if it is installed."""
    from metrobench.agents.serving import builds_dir
    from metrobench.agents.serving_record import install_record

    folder = builds_dir()
    binary = folder / name / "llama-server" if folder else None
    return install_record(binary) if binary is not None and binary.is_file() else None


def up_to_date(name: str, source: str | None, cmake_args: str) -> bool:
    """The build is installed from its tag (not the vendored tree) with these ``LLAMA_CMAKE_ARGS``."""
    if source == "vendored":
        return False           # a copy of the default build: cheap, redone every time
    record = installed_record(name)
    return bool(record) and record.get("tag") == name and record.get("source") != "vendored" \
        and record.get("llama_cmake_args", "") == cmake_args


def install(name: str, tree: str, venv: Path) -> None:
    """``scripts/install-llama-cpp.sh`` building ``name`` from ``tree`` (CMake arguments from the environment)."""
    env = dict(os.environ, LLAMA_CPP_SOURCE=tree, LLAMA_CPP_BUILD=name)
    done = subprocess.run(["bash", str(SCRIPT), str(venv)], env=env)
    if done.returncode != 0:
        raise MetrobenchError(f"llama.cpp build {name}: scripts/install-llama-cpp.sh failed (exit "
                              f"{done.returncode}; its output is above)")


def make_builds(builds: dict[str, BuildUse], venv: Path, *, source: str | None = None, force: bool = False,
                repo_url: str = UPSTREAM) -> list[str]:
    """Build and install these named builds (``StudyConfig.llama_builds``); the names, in order."""
    cmake_args = os.environ.get("LLAMA_CMAKE_ARGS", "")
    for name, use in builds.items():
        if not force and up_to_date(name, source, cmake_args):
            print(f"llama.cpp build {name}: installed from tag {name} with LLAMA_CMAKE_ARGS={cmake_args!r} "
                  f"({len(use.rows)} rows): nothing to do", flush=True)
            continue
        install(name, source_tree(name, source, work_dir(), repo_url), venv)
    return list(builds)

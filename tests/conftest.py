"""Shared fixtures: the benchmark root (../shared/metrollm-bench unless METROBENCH_DATA says otherwise)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from metrobench.data import Benchmark

REPO = Path(__file__).resolve().parents[1]


def workflow_copy(tmp: Path) -> Path:
    """The workflow's files in a fresh folder (no results, no .snakemake state), for plans and runs."""
    for name in ("Snakefile", "workflow", "config", "peft", "profiles"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp / name)
    return tmp


def data_root() -> Path:
    env = os.environ.get("METROBENCH_DATA")
    root = Path(env) if env else REPO.parent / "shared" / "metrollm-bench"
    if not (root / "cases").is_dir():
        pytest.exit(f"benchmark data not found at {root}; set METROBENCH_DATA", returncode=2)
    return root.resolve()


@pytest.fixture(scope="session")
def root() -> Path:
    return data_root()


@pytest.fixture(scope="session")
def bench(root: Path) -> Benchmark:
    return Benchmark(root)


@pytest.fixture
def broken_root(tmp_path: Path, root: Path):
    """A writable copy of the benchmark root (in a temporary folder); tests break one file."""

    def make() -> Path:
        new = tmp_path / "bench"
        for sub in ("cases", "data/systems", "data/splits"):
            shutil.copytree(root / sub, new / sub)
        for path in new.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # the shared copy is read-only
        return new

    return make


def load_json(path: Path):
    return json.loads(path.read_text())


def dump_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2))

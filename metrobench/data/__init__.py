"""The benchmark data: where it lives, whether it is intact, and typed access to it.

The names below load on first use (PEP 562): ``from metrobench.data.root import
SYSTEMS``, which every command's parser needs, must not pay for the pydantic
models of :mod:`metrobench.data.loader`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "Benchmark": "loader", "SystemData": "loader", "load_cases": "loader", "load_system": "loader",
    "SYSTEMS": "root", "resolve_root": "root", "verify_checksums": "root",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'metrobench.data' has no attribute {name!r}")
    return getattr(import_module(f"metrobench.data.{home}"), name)

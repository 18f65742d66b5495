"""The benchmark data: where it lives, whether it is intact, and typed access to it."""

from metrobench.data.loader import Benchmark, SystemData, load_cases, load_system
from metrobench.data.root import SYSTEMS, resolve_root, verify_checksums

__all__ = [
    "SYSTEMS",
    "Benchmark",
    "SystemData",
    "load_cases",
    "load_system",
    "resolve_root",
    "verify_checksums",
]

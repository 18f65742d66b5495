"""What a published student is made of: the folder's fixed names and :class:`Facts`, the study's
figures for one student (:mod:`metrobench.publish.bundle` gathers them, :mod:`metrobench.publish.card`
writes them), kept apart so the two read one definition without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The quantisation the paper published, as its file names end.
QUANT = "Q4_K_M"
SUMMARY = "training_summary.json"
CARD = "README.md"
ADAPTER = "adapter"


@dataclass
class Facts:
    """What the study produced for one student, as read (strings are the files' own text)."""

    size: str
    seed: int
    model: str
    name: str
    base_model: str
    base_repo: str
    table4: dict[str, str]
    seed_tier1: str
    delta: float
    table8: dict[str, str] | None = None
    intervals: dict[str, Any] | None = None
    by_system: dict[str, float] | None = None
    published: dict[str, str] | None = None
    serving: dict[str, Any] = field(default_factory=dict)
    licence: str | None = None
    data: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def gguf_name(name: str) -> str:
    """The GGUF's file name in the repo, as the published ones are named: ``<repo name>-Q4_K_M.gguf``."""
    return f"{name}-{QUANT}.gguf"

"""Which cases of a system a run covers: a partition under a split, then the narrowing options.

``Selection`` names a run's cases by how they were chosen — system, partition
(``all``, ``train`` or ``holdout``) under a split (recorded as a digest of its
case -> partition map), then ``--sample N``, ``--cases`` and ``--limit``, applied
in that order — and :meth:`Selection.resolve` turns it into the cases, in
case-file order. Runs record it in every record (``meta.selection``,
:mod:`metrobench.transcripts.selection` reads it back), so that scoring takes a
run's cases from the run itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from metrobench.data.partition import sample_cases, select_cases
from metrobench.errors import MetrobenchError
from metrobench.vocabulary import WHOLE

if TYPE_CHECKING:
    from metrobench.data.loader import Benchmark
    from metrobench.data.models import Case


def split_digest(partitions: dict[str, str]) -> str:
    """A short digest of a split (case id -> partition), the same for the same split file content."""
    text = json.dumps(sorted(partitions.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Selection:
    """The cases of one system a run covers."""

    system: str
    partition: str = WHOLE
    split: str = ""
    sample: int | None = None
    cases: tuple[str, ...] | None = None
    limit: int | None = None

    def to_meta(self) -> dict[str, Any]:
        out = asdict(self)
        out["cases"] = list(self.cases) if self.cases is not None else None
        return out

    @classmethod
    def from_meta(cls, raw: Any, where: str) -> Selection:
        try:
            cases = raw.get("cases")
            return cls(system=str(raw["system"]), partition=str(raw["partition"]), split=str(raw["split"]),
                       sample=raw.get("sample"), cases=tuple(cases) if cases is not None else None,
                       limit=raw.get("limit"))
        except (AttributeError, KeyError, TypeError) as exc:
            raise MetrobenchError(f"{where}: field meta.selection: not a case selection ({exc})") from None

    def resolve(self, bench: Benchmark, partitions: dict[str, str]) -> list[Case]:
        """The cases, in case-file order: partition, then sample, cases and limit."""
        cases = select_cases(bench, self.system, self.partition, partitions)
        if self.sample:
            cases = sample_cases(cases, self.sample, self.system)
        if self.cases is not None:
            unknown = sorted(set(self.cases) - {c.id for c in cases})
            if unknown:
                raise MetrobenchError(f"--cases: not cases of {self.system} ({self.partition}): {', '.join(unknown)}")
            wanted = set(self.cases)
            cases = [c for c in cases if c.id in wanted]
        return cases[: self.limit] if self.limit else cases

"""What a paper table reads, as plain values: the builders' side of the table registry.

The registry (:mod:`metrobench.paper.registry`) is the one place that reads the study
config and :mod:`metrobench.layout` for a table: it resolves the models a table
names (a student group expanded to its seeds, a model with ``repeats: k`` to its k runs),
the files it reads and the settings it prints with, into the values below, and calls the
builder with them. So a builder's signature says what it reads, and it reads nothing else:
no builder knows how a student is named, where a seed's files lie or which config key
holds a setting. Everything here is frozen, so a resolved input cannot be changed by the
table it is handed to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Model:
    """A model as a table names it (a configured model, a student group ``<size>-peft``, a run),
    resolved to the runs whose scores and transcripts stand for it.

    ``seeds``: its models (a student group's seed models; else the model itself);
    ``by_repeat``: per repeat (1..k), each seed's run name (one repeat unless ``repeats: k``).
    A table's number for the model is the mean over all of them."""

    name: str
    seeds: tuple[str, ...]
    by_repeat: tuple[tuple[str, ...], ...]

    @classmethod
    def single(cls, name: str) -> Model:
        """A model that is its own one run (a run name read from a scores folder)."""
        return cls(name, (name,), ((name,),))

    @property
    def runs(self) -> tuple[str, ...]:
        """Every run of the model: each seed's repeats in turn (the order the study config expands them in)."""
        return tuple(repeat[i] for i in range(len(self.seeds)) for repeat in self.by_repeat)


@dataclass(frozen=True)
class Row:
    """One row of the leaderboard (Table 2; the deployment and serving tables' rows)."""

    model: Model
    label: str | None
    licence: str
    vendor: str
    family: str
    reference: bool

    @property
    def shown(self) -> str:
        """The name the row is printed under: its label, else its model."""
        return self.label or self.model.name


@dataclass(frozen=True)
class Cell:
    """One cell of Table 3: a decoding setting (row) x a model family (column), served by ``model``."""

    row: str
    column: str
    model: str


@dataclass(frozen=True)
class Seed:
    """One trained student and the files its training and export wrote."""

    seed: int
    model: str
    gguf_sizes: Path
    train_metrics: Path


@dataclass(frozen=True)
class StudentGroup:
    """One student size (Tables 4 and 8): the base it is compared with, its seeds, and the paper's
    released student of that size (``published``: a configured model; None: none named)."""

    size: str
    base_model: str
    seeds: tuple[Seed, ...]
    published: str | None = None


@dataclass(frozen=True)
class Resampling:
    """The bootstrap's settings (Tables 9 and 10, the quality-cost intervals)."""

    n_resamples: int
    seed: int


@dataclass(frozen=True)
class Footprint:
    """Where a served model's GGUF lies: the file it is served from (None: not known) and, for a
    trained student, the ``gguf_sizes.json`` its export wrote (None: not a student)."""

    gguf: Path | None
    sizes: Path | None = None


@dataclass(frozen=True)
class Printed:
    """What a table's Markdown takes from the study (:mod:`metrobench.paper.markdown`): the
    leaderboard's labels by model (Tables 9, 10 and the run-to-run table name models as Table 2
    does), Table 2's termination rule (``min_normal_endings``, a share; None: said in words) and
    the note printed under the table (``report.notes``; None: none). Table 2 only: ``published``,
    place its rows among the paper's published ones in a second table below it
    (:mod:`metrobench.paper.published`); ``judge``, a note on the scoring judge where it is no real
    judge (the stand-in's digests), printed beside each row run here."""

    labels: Mapping[str, str] = field(default_factory=dict)
    min_normal_endings: float | None = None
    note: str | None = None
    published: bool = False
    judge: str | None = None

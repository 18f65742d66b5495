"""The paper's published leaderboard as data: Table 2, its rule baseline, Table 4.

Contract: :func:`load_published` reads ``metrobench/resources/published.yaml`` (package data,
installed with the package) into :class:`Published`, whose models are the file's schema and its
documentation: a key they do not know is an error. Every number is the paper's as
``../shared/paper-tables.md`` transcribes it (``tests/test_published.py`` parses that file and
compares); ``source`` names the paper, each table names its table (the transcription gives no page
numbers: ``page`` is None until one is known). ``version`` counts changes to the file.

What reads it: ``metrobench eval``'s summary and the workflow's Table 2 Markdown
(:func:`among_published`), which place the rows run here among the published ones, each marked
"published" or "run here", and say when a row run here is not the paper's held-out set (its
cases of 238, its systems of 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from metrobench.errors import MetrobenchError

RESOURCE = "published.yaml"
PUBLISHED = "published"
RUN_HERE = "run here"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Paper(_Strict):
    """The paper the numbers come from."""

    paper: str = Field(description="the paper's title")
    authors: str
    arxiv: str = Field(description="arXiv identifier")
    published: str = Field(description="year-month of publication")
    transcription: str = Field(description="the transcription the numbers were checked against")


class TableSource(_Strict):
    """Where in the paper a table's numbers are printed."""

    table: str = Field(description='the paper\'s name for it: "Table 2", "Figure 4"')
    page: int | None = Field(description="the paper's page; None: not known (the transcription gives none)")
    section: str = Field(description="the heading of the transcription's section that holds it")


class PublishedRow(_Strict):
    """One ranked row of Table 2 (held-out, 238 cases; the mean of six per-system means)."""

    rank: int = Field(ge=1)
    label: str = Field(description="the name the paper prints")
    model: str = Field(description="the row's model name in config/config.yaml (a student group: its size-peft)")
    seeds: int = Field(1, ge=1, description="seeds pooled (the paper's \"(n=2)\"), 1 for one model")
    licence: str
    vendor: str
    composite: float = Field(description="held-out composite (Tier 1 + Tier 2), percent")
    tier1: float = Field(description="held-out Tier 1, percent")

    @property
    def printed(self) -> str:
        return self.label if self.seeds <= 1 else f"{self.label} (n={self.seeds})"


class UnrankedRow(_Strict):
    """A model the paper evaluated and did not rank (the exclusion rule); it prints no scores."""

    label: str
    model: str
    reason: str


class Range(_Strict):
    min: float
    max: float


class CategoryFigures(_Strict):
    source: TableSource
    values: dict[str, float]


class Baseline(_Strict):
    """The rule-based baseline: Table 2's reference line, never ranked."""

    label: str
    model: str
    composite: float
    tier1: float
    per_system_tier1: Range = Field(description="the range of its per-system held-out Tier 1")
    per_category_composite: CategoryFigures = Field(description="Figure 4: held-out composite per category")


class Table2(_Strict):
    source: TableSource
    partition: Literal["holdout"]
    rows: list[PublishedRow]
    unranked: list[UnrankedRow]
    min_normal_endings: float = Field(gt=0, le=1, description="the exclusion rule's share of valid submits")
    baseline: Baseline


class Table4Row(_Strict):
    """One student size of Table 4 (held-out Tier 1)."""

    size: str
    base_tier1: float
    seeds: dict[int, float] = Field(description="seed -> held-out Tier 1 of that seed's student")
    mean: float
    delta: float = Field(description="mean minus base")
    seed_spread: float
    gguf: str = Field(description="the Q4_K_M GGUF's size as printed")


class Table4(_Strict):
    source: TableSource
    partition: Literal["holdout"]
    rows: list[Table4Row]
    delta_full: dict[str, float] = Field(description="the full-matrix deltas (n=955) printed under the table")


class Published(_Strict):
    """The file: the paper's Table 2 with its baseline, and Table 4."""

    schema_: int = Field(alias="schema", description="the file's layout; changes with an incompatible change")
    version: int = Field(description="counts changes to the numbers (an erratum, a new row)")
    source: Paper
    holdout_cases: int = Field(description="the held-out set's size (Table 2's n)")
    systems: int = Field(description="the metro systems a headline averages over")
    table2: Table2
    table4: Table4


@cache
def load_published() -> Published:
    """The package's published leaderboard (read once)."""
    try:
        text = resources.files("metrobench.resources").joinpath(RESOURCE).read_text(encoding="utf-8")
        return Published.model_validate(yaml.safe_load(text))
    except (OSError, ValueError) as exc:    # pydantic's ValidationError is a ValueError
        raise MetrobenchError(f"the published leaderboard ({RESOURCE}): {exc}") from exc


# --- placing rows run here among the published ones -------------------------------------------

@dataclass(frozen=True)
class Entry:
    """A row of a leaderboard shown beside the paper's: published or run here.

    ``composite_high``: a composite with unjudged Tier 2 (its upper bound; None: judged).
    ``cases``/``systems``: what a row run here was scored on (None: the paper's full held-out set).
    ``partition``: the cases' partition (a row not on ``holdout`` is not the paper's set).
    ``interval``: (lo, hi) of the composite where computed; ``tier1_interval`` likewise.
    ``judge``: a note on its Tier-2 judge where it is not a real one (the stand-in's digests).
    ``unranked``: below the termination rule (Table 2 run here does not rank it).
    """

    label: str
    composite: float
    tier1: float
    source: str = RUN_HERE
    rank: int | None = None
    reference: bool = False
    composite_high: float | None = None
    cases: int | None = None
    systems: int | None = None
    partition: str = "holdout"
    interval: tuple[float, float] | None = None
    tier1_interval: tuple[float, float] | None = None
    judge: str | None = None
    licence: str | None = None
    vendor: str | None = None
    unranked: bool = False


def judge_note(kind: str | None, model: str | None) -> str | None:
    """What a row's composite rests on where it is not a real judge's grades: the judge stand-in
    (:mod:`metrobench.standins.judge`) grades by digest; ``none`` leaves Tier 2 unjudged (the row's
    composite is then printed as its bounds, which says so)."""
    from metrobench.standins.judge import MODEL

    if kind == "openai" and model == MODEL:
        return "judge: stand-in (digests, not judgments)"
    return None


def published_entries(published: Published | None = None) -> list[Entry]:
    """Table 2's ranked rows, then the rule baseline, as entries marked published."""
    p = published or load_published()
    rows = [Entry(r.printed, r.composite, r.tier1, PUBLISHED, rank=r.rank, licence=r.licence, vendor=r.vendor)
            for r in p.table2.rows]
    b = p.table2.baseline
    return rows + [Entry(b.label, b.composite, b.tier1, PUBLISHED, reference=True, licence="-", vendor="-")]


def sample_note(entry: Entry, published: Published | None = None) -> str | None:
    """How a row run here differs from the paper's held-out set; None: it is the full set."""
    if entry.source == PUBLISHED:
        return None
    p = published or load_published()
    parts = []
    if entry.partition != "holdout":
        parts.append(f"partition {entry.partition}, not the paper's held-out set")
    if entry.cases is not None and (entry.partition != "holdout" or entry.cases < p.holdout_cases):
        parts.append(f"sampled: {entry.cases} cases of {p.holdout_cases}" if entry.partition == "holdout"
                     else f"{entry.cases} cases")
    if entry.systems is not None and entry.systems < p.systems:
        parts.append(f"{entry.systems} of {p.systems} systems")
    parts = [", ".join(parts)] if parts else []
    cis = []
    if parts and entry.interval is not None:
        cis.append(f"composite [{entry.interval[0]:.2f}, {entry.interval[1]:.2f}]")
    if parts and entry.tier1_interval is not None:
        cis.append(f"Tier 1 [{entry.tier1_interval[0]:.2f}, {entry.tier1_interval[1]:.2f}]")
    if cis:
        parts.append("95 % CI " + ", ".join(cis))
    if entry.unranked:
        parts.append("unranked: below the termination rule")
    if entry.judge:
        parts.append(entry.judge)
    return "; ".join(parts) if parts else None


def among_published(mine: list[Entry], published: Published | None = None) -> list[Entry]:
    """The published rows with ``mine`` placed among them: ranked by composite (a bounded one by its
    lower bound), then Tier 1; a published row before a row run here on a tie. Reference rows (the
    baselines) follow the ranked ones. Ranks are the published ones; a row run here has none."""
    every = published_entries(published) + list(mine)
    key = lambda e: (e.reference, -e.composite, -e.tier1, e.source != PUBLISHED)  # noqa: E731
    return sorted(every, key=key)


def window(rows: list[Entry], around: int = 3) -> list[Entry | int]:
    """The ranked rows within ``around`` of a row run here, the reference rows, and in place of each
    stretch left out the number of rows it holds."""
    keep = set()
    for i, e in enumerate(rows):
        if e.source == RUN_HERE or e.reference:
            keep.update(range(max(0, i - around), i + around + 1) if not e.reference else {i})
    out: list[Entry | int] = []
    skipped = 0
    for i, e in enumerate(rows):
        if i in keep:
            if skipped:
                out.append(skipped)
                skipped = 0
            out.append(e)
        else:
            skipped += 1
    if skipped:
        out.append(skipped)
    return out


def composite_text(e: Entry) -> str:
    return f"{e.composite:.2f}" if e.composite_high is None else f"{e.composite:.2f}–{e.composite_high:.2f}"


def render_among(mine: list[Entry], around: int | None = 3, published: Published | None = None) -> str:
    """Plain text for the terminal: the rows run here among Table 2's published rows."""
    p = published or load_published()
    rows = among_published(mine, p)
    shown = window(rows, around) if around is not None else list(rows)
    lines = [f"Among the paper's published {p.table2.source.table} (held-out, {p.holdout_cases} cases, "
             f"{p.systems} systems; arXiv:{p.source.arxiv}):",
             f"{'rank':>5}  {'model':<28}{'comp.':>13}{'tier1':>8}  source"]
    for e in shown:
        if isinstance(e, int):
            lines.append(f"{'':>5}  ... {e} published row{'s' if e != 1 else ''}")
            continue
        rank = "ref." if e.reference else str(e.rank) if e.rank else "-"
        note = sample_note(e, p)
        lines.append(f"{rank:>5}  {e.label:<28}{composite_text(e):>13}{e.tier1:>8.2f}  {e.source}"
                     + (f" ({note})" if note else ""))
    return "\n".join(lines)

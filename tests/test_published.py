"""The published leaderboard (metrobench/resources/published.yaml) against the paper's transcription.

The authority is ``../shared/paper-tables.md``: these tests parse it and compare every number of
the package's file with it (never with a second hand-typed copy), and check the rendering that
places rows run here among the published ones.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from metrobench.paper.published import PUBLISHED, RUN_HERE, Entry, among_published, load_published, render_among

REPO = Path(__file__).resolve().parents[1]


def paper_tables() -> str:
    candidates = [os.environ.get("METROBENCH_PAPER_TABLES"), REPO.parent / "shared" / "paper-tables.md",
                  "/work/shared/paper-tables.md"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c).read_text(encoding="utf-8")
    pytest.skip("../shared/paper-tables.md (the paper's transcription) is not on this machine")


def section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def abbreviates(short: str, full: str) -> bool:
    """ "Mistral RL" abbreviates "Mistral Research License": same words, then the initials."""
    if short == full:
        return True
    s, f = short.split(), full.split()
    return s[:-1] == f[:len(s) - 1] and s[-1] == "".join(w[0] for w in f[len(s) - 1:])


# rank, label, then "(licence, vendor)" or "(licence)" where printed (a capitalised parenthesis: the
# label's own are lower case, "(xhigh)", "(n=2)"), then Comp., Tier 1
ROW = re.compile(r"(\d+) (.+?)(?: \(([A-Z][^(),]*)(?:, ([^()]*))?\))? (\d+\.\d+), (\d+\.\d+)")


def table2_rows(text: str) -> list[tuple[int, str, str | None, str | None, float, float]]:
    body = " ".join(section(text, "Table 2").splitlines()[1:])
    body = body[:body.index("Rule-based baseline")].strip().rstrip(".")
    rows = []
    for item in body.split(" · "):
        m = ROW.fullmatch(item.strip())
        assert m, item
        rank, label, licence, vendor, comp, t1 = m.groups()
        rows.append((int(rank), label, licence, vendor, float(comp), float(t1)))
    return rows


def test_table2_is_the_papers_row_for_row():
    text = paper_tables()
    printed = table2_rows(text)
    published = load_published().table2.rows
    assert len(printed) == len(published) == 25
    family: dict[str, tuple[str, str]] = {}
    for (rank, label, licence, vendor, comp, t1), row in zip(printed, published):
        assert (row.rank, row.printed, row.composite, row.tier1) == (rank, label, comp, t1)
        key = re.match(r"[A-Za-z]+", label).group(0)
        if licence is not None:      # printed at a family's first row: that row's own
            assert abbreviates(licence, row.licence), (label, licence, row.licence)
            assert vendor is None or vendor == row.vendor, (label, vendor, row.vendor)
            family[key] = (row.licence, row.vendor if vendor is None else vendor)
            if vendor is None:       # "(Mistral RL)": the vendor is the family's
                assert row.vendor == family.get(key.replace("Ministral", "Mistral"), (None, row.vendor))[1]
        else:                        # the family's, as printed at its first row
            assert (row.licence, row.vendor) == family[key], label


def test_the_baseline_and_its_per_system_and_per_category_figures_are_the_papers():
    text = paper_tables()
    m = re.search(r"Rule-based baseline: (\d+\.\d+), (\d+\.\d+) \(per-system Tier 1 (\d+\.\d+)–(\d+\.\d+)\)", text)
    b = load_published().table2.baseline
    assert (b.composite, b.tier1, b.per_system_tier1.min, b.per_system_tier1.max) == tuple(map(float, m.groups()))
    figures = re.search(r"baseline composite: ([^)]*)\)", " ".join(section(text, "Figures").split())).group(1)
    printed = {k: float(v) for k, v in (item.rsplit(" ", 1) for item in figures.split(", "))}
    assert b.per_category_composite.values == printed


def test_table4_is_the_papers():
    text = paper_tables()
    lines = [line for line in section(text, "Table 4").splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table4 = load_published().table4
    number = lambda c: float(c.replace("−", "-").lstrip("±+"))  # noqa: E731
    for line, row in zip(lines[1:], table4.rows, strict=True):
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        assert cells["Size"].lower() == row.size
        assert number(cells["Base T1"]) == row.base_tier1 and number(cells["mean"]) == row.mean
        assert number(cells["Δ vs base"]) == row.delta and number(cells["seed spread"]) == row.seed_spread
        assert {int(k[1:]): number(v) for k, v in cells.items() if re.fullmatch(r"s\d+", k) and v != "–"} == row.seeds
        assert cells["Q4_K_M GGUF"] == row.gguf
    deltas = re.search(r"Full-matrix deltas: ([^.\n]*\.\d+(?:, [^,\n]*?\d+\.\d+)*)", text).group(1)
    assert [number(d) for d in deltas.split(", ")] == list(table4.delta_full.values())


def test_the_file_names_its_source_and_the_held_out_set():
    p = load_published()
    assert p.source.arxiv in paper_tables() and p.holdout_cases == 238 and p.systems == 6
    assert "(238 cases)" in paper_tables()
    assert p.table2.source.table == "Table 2" and p.table4.source.table == "Table 4"
    assert [u.label for u in p.table2.unranked] == ["Llama 3.1-8B", "Gemma 4 E4B", "Gemma 4 E2B"]


def test_the_file_ships_as_package_data():
    import tomllib

    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "resources/*.yaml" in settings["metrobench"]


def test_a_row_run_here_is_placed_among_the_published_and_a_sample_says_so():
    mine = Entry("mine", 85.0, 88.0, cases=12, systems=6)
    rows = among_published([mine])
    i = rows.index(mine)
    assert rows[i - 1].label == "Ministral 8B 2512" and rows[i + 1].label == "Gemma 4 26B-A4B"
    assert rows[-1].reference and rows[-1].source == PUBLISHED
    text = render_among([mine])
    line = next(line for line in text.splitlines() if " mine " in line)
    assert f"{RUN_HERE} (sampled: 12 cases of 238)" in line
    assert "   20  Ministral 8B 2512" in text and "published" in text
    full = render_among([Entry("mine", 85.0, 88.0, cases=238, systems=6)])
    assert "sampled" not in full


def table2_frame(holdout_cases: int, judged: bool = True):
    import pandas as pd

    return pd.DataFrame({
        "rank": pd.array([1, None], dtype="Int64"), "model": ["My model", "Rule-based baseline"],
        "licence": ["MIT", "-"], "vendor": ["Me", "-"], "composite": [86.0, 77.1],
        "composite_upper": [86.0 if judged else 95.0, 77.1], "judged": [judged, True], "tier1": [88.0, 84.6],
        "seeds": [1, 1], "normal_endings_pct": [100.0, 100.0], "ranked": [True, False],
        "reference": [False, True], "holdout_cases": [holdout_cases, holdout_cases]})


def test_table2s_markdown_places_the_rows_run_here_among_the_published_and_says_a_sample_is_one():
    from metrobench.paper.inputs import Printed
    from metrobench.paper.markdown import markdown

    text = markdown("table2", table2_frame(12), Printed(published=True,
                                                       judge="judge: stand-in (digests, not judgments)"))
    own, beside = text.split("Beside the paper's published Table 2", 1)
    assert own.splitlines()[2] == "| 1 | My model | MIT | Me | 86.00 | 88.00 |"     # the table run here, as before
    lines = beside.splitlines()
    assert lines[2] == "| Rank | Model | Licence | Vendor | Comp. | Tier 1 | Source |"
    rows = [line for line in lines if line.startswith("| ") and "Rank" not in line]
    assert len(rows) == 25 + 1 + 2           # the paper's ranked rows and baseline, and the two rows run here
    mine = rows.index(next(r for r in rows if "My model" in r))
    assert "| 19 | GPT-5.4-mini |" in rows[mine - 1] and "| 20 | Ministral 8B 2512 |" in rows[mine + 1]
    assert rows[mine] == ("|  | My model | MIT | Me | 86.00 | 88.00 | run here (sampled: 12 cases of 238; "
                          "judge: stand-in (digests, not judgments)) |")
    assert rows[1].endswith("| published |") and rows[-2:] == [
        "| ref. | Rule-based baseline | - | - | 77.10 | 84.60 | published |",
        "| ref. | Rule-based baseline | - | - | 77.10 | 84.60 | run here (sampled: 12 cases of 238; judge: stand-in "
        "(digests, not judgments)) |"]
    full = markdown("table2", table2_frame(238, judged=False), Printed(published=True))
    assert "sampled" not in full and "| My model | MIT | Me | 86.00–95.00 | 88.00 | run here |" in full
    assert "Beside" not in markdown("table2", table2_frame(12))    # without Printed.published: the table alone


def test_a_row_run_here_below_the_termination_rule_says_it_is_unranked_beside_the_published():
    from metrobench.paper.inputs import Printed
    from metrobench.paper.markdown import markdown

    frame = table2_frame(238)
    frame.loc[0, "ranked"] = False
    frame["rank"] = frame["rank"].astype("Int64").where(frame["ranked"])
    beside = markdown("table2", frame, Printed(published=True)).split("Beside the paper's", 1)[1]
    assert "| My model | MIT | Me | 86.00 | 88.00 | run here (unranked: below the termination rule) |" in beside

"""The paper's tables 2/3/4/8/9/10 and figure 5's data on synthetic scores, with hand-computed answers.

Every synthetic case has two components of maximum 100: a Tier 1 one scored
``x`` and a Tier 2 one scored ``y`` (``None``: not judged), so its Tier 1
percent is ``x`` and its composite ``(x + y) / 2``. Two systems, so a headline
is the mean of two system means.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from metrobench.paper import figures
from metrobench.scoring.store import SCHEMA
from metrobench.stats.cases import Cases, load_case_scores
from metrobench.paper.tables import Skip, table2, table3, table4, table8, table9, table10
from metrobench.study import StudyConfig

HOLDOUT = ("MARTA-A-001", "MARTA-B-001", "BART-A-001", "BART-C-001")
TRAIN = "MARTA-C-001"
#: model -> (Tier 1 of the four held-out cases, Tier 1 of the train case, Tier 2 score, cases with an error)
MODELS: dict[str, tuple[tuple[float, ...], float, float | None, tuple[str, ...]]] = {
    "m1": ((80, 90, 70, 60), 0, 100, ("BART-A-001",)),        # 4 of 5 ended: exactly the threshold
    "m2": ((100, 100, 100, 100), 40, None, ()),               # judged components left unjudged
    "small-peft-s42": ((50, 60, 70, 80), 90, 0, ()),
    "small-peft-s43": ((70, 80, 90, 100), 100, 0, ("BART-A-001", "BART-C-001")),  # 3 of 5 ended
    "tiny-peft-s42": ((80, 80, 80, 80), 40, 20, ()),           # composite 50, as m2's lower bound
}


def synthetic_table(models: dict = MODELS) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for model, (held, train, tier2, errors) in models.items():
        for case_id, x in [*zip(HOLDOUT, held), (TRAIN, train)]:
            system = "marta" if case_id.startswith("MARTA") else "bart"
            for component, tier, score in (("route_correct", 1, x), ("advisory_content_correct", 2, tier2)):
                values = {"model": model, "system": system, "case_id": case_id,
                          "category": case_id.split("-")[1],
                          "partition": "train" if case_id == TRAIN else "holdout",
                          "component": component, "tier": tier,
                          "score": None if score is None else float(score), "max": 100.0,
                          "judged": tier == 2, "reason": "", "error": "boom" if case_id in errors else None}
                for name, value in values.items():
                    rows[name].append(value)
    return pa.table(rows, schema=SCHEMA)


@pytest.fixture(scope="module")
def cases() -> Cases:
    return load_case_scores(synthetic_table())


def study(**sections) -> StudyConfig:
    """A study config of these sections, the others at their defaults."""
    return StudyConfig.model_validate(sections)


STUDENTS = {"small": {"base_model": "m2", "recipe": "small.yaml", "seeds": [42, 43]}}


def test_table2_ranks_at_the_termination_threshold_and_averages_seed_groups(cases):
    config = study(leaderboard=[{"model": "small-peft", "label": "Small + PEFT"},
                                {"model": "m2", "label": "M2", "licence": "Apache-2.0", "vendor": "V2"},
                                {"model": "m1", "label": "M1", "licence": "proprietary", "vendor": "V1"},
                                {"model": "ghost"}],
                   students=STUDENTS, termination={"min_normal_endings": 0.8})
    expected = pd.DataFrame({
        "rank": pd.array([1, 2, None], dtype="Int64"),
        "model": ["M1", "M2", "Small + PEFT"], "licence": ["proprietary", "Apache-2.0", ""],
        "vendor": ["V1", "V2", ""],
        # m1: systems (90+95)/2 and (85+80)/2; m2: x/2 with nothing judged; seeds: (32.5 + 42.5) / 2
        "composite": [87.5, 50.0, 37.5],
        "composite_upper": [87.5, 100.0, 37.5],  # m2's upper bound counts the unjudged at their maximum
        "judged": [True, False, True],
        "tier1": [75.0, 100.0, 75.0],            # (85 + 65) / 2; 100; ((55+75)/2 + (75+95)/2) / 2
        "seeds": [1, 1, 2],
        "normal_endings_pct": [80.0, 100.0, 60.0],  # the group's worst seed
        "ranked": [True, True, False],              # 0.8 >= 0.8 ranks
    })
    pd.testing.assert_frame_equal(table2(cases, config), expected)


def test_table2_breaks_composite_ties_by_tier1_and_skips_without_scores(cases):
    config = study(leaderboard=[{"model": "small-peft-s42"}, {"model": "tiny-peft-s42"}, {"model": "m2"}])
    frame = table2(cases, config)
    assert frame[["rank", "model", "composite", "tier1"]].values.tolist() == [
        [1, "m2", 50.0, 100.0], [2, "tiny-peft-s42", 50.0, 80.0], [3, "small-peft-s42", 32.5, 65.0]]
    with pytest.raises(Skip, match="table2: no scores for ghost"):
        table2(cases, study(leaderboard=[{"model": "ghost"}]))
    with pytest.raises(Skip, match="no leaderboard"):
        table2(cases, study())


def test_table3_is_the_sensitivity_grid_in_config_order(cases):
    config = study(sensitivity=[{"row": "greedy", "column": "4B", "model": "m1"},
                                {"row": "greedy", "column": "9B", "model": "m2"},
                                {"row": "sampled", "column": "4B", "model": "small-peft-s42"}])
    expected = pd.DataFrame({"setting": ["greedy", "sampled"], "4B": [75.0, 65.0], "9B": [100.0, np.nan]})
    expected.columns.name = "column"
    pd.testing.assert_frame_equal(table3(cases, config), expected)
    with pytest.raises(Skip, match="table3: no scores for ghost"):
        table3(cases, study(sensitivity=[{"row": "greedy", "column": "4B", "model": "ghost"}]))
    with pytest.raises(Skip, match="no serving variants"):
        table3(cases, study())


def _write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Training outputs of the small student: GGUF sizes and train metrics of both seeds."""
    for seed, gguf, wall, adapter in ((42, 1000, 600.0, 100), (43, 1001, 900.0, 201)):
        folder = tmp_path / "peft" / "small" / f"seed{seed}"
        _write_json(folder / "gguf_sizes.json", {"model-Q4_K_M.gguf": gguf, "model-f16.gguf": 9})
        _write_json(folder / "adapter" / "train_metrics.json",
                    {"recipe": {"max_length": 2048}, "wall_s": wall, "adapter_bytes": adapter})
    return tmp_path


SWEEP = {"small": STUDENTS["small"], "tiny": {"base_model": "m1", "recipe": "tiny.yaml", "seeds": [42]}}


def test_table4_is_the_peft_sweep_with_deltas_spread_and_sizes(cases, results):
    expected = pd.DataFrame([
        # base m2: 100 held out, full (80 + 100) / 2; seeds 65 and 85; full seeds 70.85 and 89.15
        {"size": "small", "base_tier1": 100.0, "s42": 65.0, "s43": 85.0, "mean": 75.0, "delta": -25.0,
         "seed_spread": 10.0, "delta_full": -10.0, "q4_k_m_gguf_bytes": 1000},
        # base m1: 75 held out, full (56.7 + 65) / 2 = 60.85; the seed: 80, full (66.7 + 80) / 2
        {"size": "tiny", "base_tier1": 75.0, "s42": 80.0, "s43": None, "mean": 80.0, "delta": 5.0,
         "seed_spread": 0.0, "delta_full": 12.5, "q4_k_m_gguf_bytes": None},
    ])
    frame = table4(cases, study(students=SWEEP), results)
    pd.testing.assert_frame_equal(frame, expected)
    with pytest.raises(Skip, match="table4: no scores for big-peft-s42"):
        table4(cases, study(students={**SWEEP, "big": {**SWEEP["tiny"], "seeds": [42]}}), results)


def test_figure5_plots_each_sizes_gain_against_its_base(cases, results, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
    figures.figure5(table4(cases, study(students=SWEEP), results), results / "figure5.png")
    [ax] = drawn[0].axes
    [points] = ax.collections
    assert points.get_offsets().tolist() == [[100.0, -25.0], [75.0, 5.0]]
    assert [(t.get_text(), t.xy) for t in ax.texts] == [("small", (100.0, -25.0)), ("tiny", (75.0, 5.0))]
    assert [line.get_ydata()[0] for line in ax.lines] == [0]  # the no-gain line
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("base held-out Tier 1", "PEFT gain (Tier 1 points)")


def test_table8_is_the_training_cost_per_size(results):
    expected = pd.DataFrame([{"size": "small", "max_seq": 2048, "minutes_per_seed": 12.5,
                              "adapter_bytes": 150, "q4_k_m_gguf_bytes": 1000, "seeds": 2}])
    pd.testing.assert_frame_equal(table8(study(students=SWEEP), results), expected)  # tiny: not trained
    (results / "peft" / "small" / "seed43" / "adapter" / "train_metrics.json").unlink()
    assert table8(study(students=SWEEP), results)[["minutes_per_seed", "adapter_bytes", "seeds"]].values.tolist() \
        == [[10.0, 100, 1]]
    with pytest.raises(Skip, match=r"table8: no training metrics \(tiny/seed42\)"):
        table8(study(students={"tiny": SWEEP["tiny"]}), results)
    with pytest.raises(Skip, match=r"no students"):
        table8(study(), results)


STATS = {"n_resamples": 1000, "seed": 42, "bootstrap_models": ["m1", "small-peft"],
         "comparisons": [["small-peft", "m2"], ["m1", "m2"]]}


def test_table9_intervals_are_pinned_and_the_estimates_computed_by_hand(cases):
    frame = table9(cases, study(students=STUDENTS, stats=STATS), "holdout")
    columns = ["model", "statistic", "n", "tier1", "tier1_lo", "tier1_hi", "composite", "composite_lo", "composite_hi"]
    assert frame[columns].values.tolist() == [
        # m1: Tier 1 80, 90 | 70, 60; composite 90, 95 | 85, 80 (pooled mean = mean of the two system means)
        ["m1", "pooled", 4, 75.0, 65.0, 85.0, 87.5, 82.5, 92.5],
        ["m1", "headline", 4, 75.0, 70.0, 80.0, 87.5, 85.0, 90.0],
        # small-peft: the per-case mean of its two seeds, 60, 70 | 80, 90 (composite: half)
        ["small-peft", "pooled", 4, 75.0, 65.0, 85.0, 37.5, 32.5, 42.5],
        ["small-peft", "headline", 4, 75.0, 70.0, 80.0, 37.5, 35.0, 40.0],
    ]
    assert set(frame["partition"]) == {"holdout"}


def test_table10_paired_deltas_p_values_and_holm(cases):
    frame = table10(cases, study(students=STUDENTS, stats=STATS))
    columns = ["a", "b", "partition", "metric", "n", "delta", "lo", "hi", "excludes_zero"]
    assert frame[columns].values.tolist() == [
        ["small-peft", "m2", "holdout", "tier1", 4, -25.0, -35.0, -15.0, True],    # -20, -10, -40, -30
        ["small-peft", "m2", "holdout", "composite", 4, -12.5, -17.5, -7.5, True],
        ["m1", "m2", "holdout", "tier1", 4, -25.0, -35.0, -15.0, True],
        ["m1", "m2", "holdout", "composite", 4, 37.5, 32.5, 42.5, True],           # m2's lower bound: 50
        ["small-peft", "m2", "full", "tier1", 5, -9.0, -32.0, 25.0, False],        # the train case: +55
        ["small-peft", "m2", "full", "composite", 5, -4.5, -16.0, 12.5, False],
        ["m1", "m2", "full", "tier1", 5, -28.0, -38.0, -18.0, True],
        ["m1", "m2", "full", "composite", 5, 36.0, 31.0, 41.0, True],
    ]
    one_sided = 2 / 1001  # every resample on one side of zero: 2 x (0 + 1) / (n + 1)
    assert frame["p"].tolist() == [one_sided] * 4 + [0.5454545454545454] * 2 + [one_sided] * 2
    # Holm: the six smallest share rank 1's factor 8 (monotone), the two largest are capped at 1
    assert frame["p_holm"].tolist() == [8 * one_sided] * 4 + [1.0] * 2 + [8 * one_sided] * 2
    with pytest.raises(Skip, match="no comparisons"):
        table10(cases, study())


def _rule_agent_runs(root: Path, results: Path) -> None:
    """Real transcripts: the rule agent in both modes on doha and cta's held-out cases."""
    from metrobench.cli import main

    for model, mode in (("rule-agent", "baseline"), ("rule-agent-teacher", "teacher")):
        assert main(["rule-agent", "--data", str(root), "--system", "doha", "--system", "cta", "--mode", mode,
                     "--partition", "holdout", "--model", model, "--no-verify",
                     "--out", str(results / "runs" / model / "{system}.jsonl")]) == 0


def test_protocol_table_from_real_rule_agent_transcripts(root, tmp_path):
    from metrobench.paper.tables import protocol

    _rule_agent_runs(root, tmp_path)
    lines = [json.loads(x) for s in ("cta", "doha")
             for x in (tmp_path / "runs" / "rule-agent" / f"{s}.jsonl").read_text().splitlines()]
    refused = sum(r["tool_calls_made"][-1]["error"] is not None for r in lines)   # one submission a case
    assert len(lines) == 78 and 0 < refused < 78
    frame = protocol(study(stats={"bootstrap_models": ["rule-agent", "rule-agent-teacher"]}), tmp_path)
    assert frame.to_dict("records") == [
        {"model": "rule-agent", "cases": 78, "executed_call_pct": 100.0,
         "accepted_pct": round(100 * (78 - refused) / 78, 1), "mean_rounds": 0.0, "ended_pct": 100.0,
         "model_error_pct": 0.0, "infrastructure_error_pct": 0.0},
        {"model": "rule-agent-teacher", "cases": 78, "executed_call_pct": 100.0, "accepted_pct": 100.0,
         "mean_rounds": 0.0, "ended_pct": 100.0, "model_error_pct": 0.0, "infrastructure_error_pct": 0.0}]
    assert list(protocol(study(), tmp_path)["model"]) == ["rule-agent", "rule-agent-teacher"]  # every run
    with pytest.raises(Skip, match="protocol: no transcripts .* for ghost"):
        protocol(study(stats={"bootstrap_models": ["rule-agent", "ghost"]}), tmp_path)


def test_protocol_counts_unread_calls_rounds_and_endings_by_kind(root, tmp_path):
    """Four of the teacher's real records edited into the endings a served model can have."""
    from metrobench.paper.tables import protocol

    _rule_agent_runs(root, tmp_path)
    path = tmp_path / "runs" / "rule-agent-teacher" / "doha.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()][:4]
    unread = {"name": "route_planner", "arguments": "{oops", "result": None,
              "error": "arguments are not valid JSON: Expecting property name"}
    records[0].update(tool_calls_made=[unread], response=None, error="tool-call budget exhausted", api_rounds=6)
    records[1].update(error="endpoint failed: HTTP 503", api_rounds=1, response=None,
                      tool_calls_made=[], meta={"ending": "infrastructure", "ending_kind": "infrastructure",
                                                          "retryable": True})   # as the runner marks it
    records[2].update(api_rounds=3)
    records[3].update(api_rounds=2)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "runs" / "rule-agent-teacher" / "cta.jsonl").unlink()
    row = protocol(study(stats={"bootstrap_models": ["rule-agent-teacher"]}), tmp_path).iloc[0].to_dict()
    assert row == {"model": "rule-agent-teacher", "cases": 4, "executed_call_pct": 50.0, "accepted_pct": 50.0,
                   "mean_rounds": 3.0, "ended_pct": 50.0, "model_error_pct": 25.0,
                   "infrastructure_error_pct": 25.0}
    script = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "protocol_stats.py"),
                             "--runs", str(tmp_path / "runs"), "--model", "rule-agent-teacher"],
                            capture_output=True, text=True)
    assert script.returncode == 0, script.stderr
    assert "| rule-agent-teacher | 4 | 50.0 | 50.0 | 3.0 | 50.0 | 25.0 | 25.0 |" in script.stdout

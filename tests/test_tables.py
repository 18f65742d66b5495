"""The paper's tables 2/3/4/8/9/10 and figure 5's data on synthetic scores, with hand-computed answers.

Every synthetic case has two components of maximum 100: a Tier 1 one scored
``x`` and a Tier 2 one scored ``y`` (``None``: not judged), so its Tier 1
percent is ``x`` and its composite ``(x + y) / 2``. Two systems, so a headline
is the mean of two system means.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from metrobench import layout
from metrobench.paper import figures
from metrobench.paper.markdown import PUBLISHED_COLUMN, markdown
from metrobench.scoring.store import SCHEMA
from metrobench.stats.cases import Cases, load_case_scores
from metrobench.paper.tables import Skip
from metrobench.study import StudyConfig, load_study
from table_helpers import built, printed, sources

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


def holdout(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 9's held-out rows (the registry builds the full matrix's, then these)."""
    return frame[frame["partition"] == "holdout"].reset_index(drop=True)


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
        "reference": [False, False, False],
        "holdout_cases": [4, 4, 4],                 # the held-out cases each row's numbers rest on
    })
    pd.testing.assert_frame_equal(built("table2", config, cases), expected)


def test_table2_breaks_composite_ties_by_tier1_and_skips_without_scores(cases):
    config = study(leaderboard=[{"model": "small-peft-s42"}, {"model": "tiny-peft-s42"}, {"model": "m2"}])
    frame = built("table2", config, cases)
    assert frame[["rank", "model", "composite", "tier1"]].values.tolist() == [
        [1, "m2", 50.0, 100.0], [2, "tiny-peft-s42", 50.0, 80.0], [3, "small-peft-s42", 32.5, 65.0]]
    with pytest.raises(Skip, match="table2: no scores for ghost"):
        built("table2", study(leaderboard=[{"model": "ghost"}]), cases)
    with pytest.raises(Skip, match="no leaderboard"):
        built("table2", study(), cases)


def test_table3_is_the_sensitivity_grid_in_config_order(cases):
    config = study(sensitivity=[{"row": "greedy", "column": "4B", "model": "m1"},
                                {"row": "greedy", "column": "9B", "model": "m2"},
                                {"row": "sampled", "column": "4B", "model": "small-peft-s42"}])
    expected = pd.DataFrame({"setting": ["greedy", "sampled"], "4B": [75.0, 65.0], "9B": [100.0, np.nan]})
    expected.columns.name = "column"
    pd.testing.assert_frame_equal(built("table3", config, cases), expected)
    with pytest.raises(Skip, match="table3: no scores for ghost"):
        built("table3", study(sensitivity=[{"row": "greedy", "column": "4B", "model": "ghost"}]), cases)
    with pytest.raises(Skip, match="no serving variants"):
        built("table3", study(), cases)


def _write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Training outputs of the small student: GGUF sizes and train metrics of both seeds."""
    for seed, gguf, wall, adapter, dtype in ((42, 1000, 600.0, 100, "float32"), (43, 1001, 900.0, 201, "bfloat16")):
        folder = tmp_path / "peft" / "small" / f"seed{seed}"
        _write_json(folder / "gguf_sizes.json", {"model-Q4_K_M.gguf": gguf, "model-f16.gguf": 9,
                                                 "llama_cpp": "b8642 (commit 1a2b3c4d5e6f)"})
        _write_json(folder / "adapter" / "train_metrics.json",
                    {"recipe": {"max_length": 2048}, "wall_s": wall, "adapter_bytes": adapter,
                     "adapter_params": 25, "adapter_dtypes": [dtype]})
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
    frame = built("table4", study(students=SWEEP), cases, results)
    pd.testing.assert_frame_equal(frame, expected)
    with pytest.raises(Skip, match="table4: no scores for big-peft-s42"):
        built("table4", study(students={**SWEEP, "big": {**SWEEP["tiny"], "seeds": [42]}}), cases, results)


def test_figure5_plots_each_sizes_gain_against_its_base(cases, results, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
    figures.figure5(built("table4", study(students=SWEEP), cases, results), results / "figure5.png")
    [ax] = drawn[0].axes
    [points] = ax.collections
    assert points.get_offsets().tolist() == [[100.0, -25.0], [75.0, 5.0]]
    assert [(t.get_text(), t.xy) for t in ax.texts] == [("small", (100.0, -25.0)), ("tiny", (75.0, 5.0))]
    assert [line.get_ydata()[0] for line in ax.lines] == [0]  # the no-gain line
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("base held-out Tier 1", "PEFT gain (Tier 1 points)")


def test_table8_is_the_training_cost_per_size(results):
    def table8():
        return built("table8", study(students=SWEEP), results=results)

    # the seeds' LoRA dtypes differ here (one bf16 run): both are shown; "small" is no paper size
    expected = pd.DataFrame([{"size": "small", "max_seq": 2048, "minutes_per_seed": 12.5,
                              "adapter_bytes": 150, "adapter_params": 25, "adapter_dtypes": "bfloat16+float32",
                              "paper_adapter_bytes": None, "q4_k_m_gguf_bytes": 1000,
                              "gguf_llama_cpp": "b8642 (commit 1a2b3c4d5e6f)", "seeds": 2}])
    pd.testing.assert_frame_equal(table8(), expected)  # tiny: not trained
    (results / "peft" / "small" / "seed43" / "adapter" / "train_metrics.json").unlink()
    columns = ["minutes_per_seed", "adapter_bytes", "adapter_dtypes", "seeds"]
    assert table8()[columns].values.tolist() == [[10.0, 100, "float32", 1]]
    # a run from before the adapter's parameters and dtypes were recorded: blank, never a guess
    _write_json(results / "peft" / "small" / "seed42" / "adapter" / "train_metrics.json",
                {"recipe": {"max_length": 2048}, "wall_s": 600.0, "adapter_bytes": 100})
    assert table8()[["adapter_params", "adapter_dtypes"]].values.tolist() == [[None, None]]
    # GGUFs quantised before the llama.cpp was recorded: blank
    for seed in (42, 43):
        _write_json(results / "peft" / "small" / f"seed{seed}" / "gguf_sizes.json", {"model-Q4_K_M.gguf": 1000})
    assert table8()["gguf_llama_cpp"].tolist() == [None]
    with pytest.raises(Skip, match=r"table8: no training metrics \(tiny/seed42\)"):
        built("table8", study(students={"tiny": SWEEP["tiny"]}), results=results)
    with pytest.raises(Skip, match=r"no students"):
        built("table8", study(), results=results)


STATS = {"n_resamples": 1000, "seed": 42, "bootstrap_models": ["m1", "small-peft"],
         "comparisons": [["small-peft", "m2"], ["m1", "m2"]]}


def test_table9_intervals_are_pinned_and_the_estimates_computed_by_hand(cases):
    frame = holdout(built("table9", study(students=STUDENTS, stats=STATS), cases))
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
    frame = built("table10", study(students=STUDENTS, stats=STATS), cases)
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
        built("table10", study(), cases)


def _rule_agent_runs(root: Path, results: Path) -> None:
    """Real transcripts: the rule agent in both modes on doha and cta's held-out cases."""
    from metrobench.cli import main

    for model, mode in (("rule-agent", "baseline"), ("rule-agent-teacher", "teacher")):
        assert main(["rule-agent", "--data", str(root), "--system", "doha", "--system", "cta", "--mode", mode,
                     "--partition", "holdout", "--model", model, "--no-verify",
                     "--out", layout.run_path(model, "{system}", "all", str(results))]) == 0


def test_protocol_table_from_real_rule_agent_transcripts(root, tmp_path):
    _rule_agent_runs(root, tmp_path)
    lines = [json.loads(x) for s in ("cta", "doha")
             for x in Path(layout.run_path("rule-agent", s, "all", str(tmp_path))).read_text().splitlines()
             if "header" not in json.loads(x)]   # each view's first line is its run header
    refused = sum(r["tool_calls_made"][-1]["error"] is not None for r in lines)   # one submission a case
    assert len(lines) == 78 and 0 < refused < 78
    frame = built("protocol", study(stats={"bootstrap_models": ["rule-agent", "rule-agent-teacher"]}),
                  results=tmp_path)
    assert frame.to_dict("records") == [
        {"model": "rule-agent", "cases": 78, "executed_call_pct": 100.0,
         "accepted_pct": round(100 * (78 - refused) / 78, 1), "mean_rounds": 0.0, "ended_pct": 100.0,
         "model_error_pct": 0.0, "context_error_pct": 0.0, "infrastructure_error_pct": 0.0},
        {"model": "rule-agent-teacher", "cases": 78, "executed_call_pct": 100.0, "accepted_pct": 100.0,
         "mean_rounds": 0.0, "ended_pct": 100.0, "model_error_pct": 0.0, "context_error_pct": 0.0,
         "infrastructure_error_pct": 0.0}]
    # no bootstrap_models: every benchmarked model (here the leaderboard's), as the workflow's inputs say
    board = study(leaderboard=[{"model": "rule-agent-teacher"}, {"model": "rule-agent"}])
    assert list(built("protocol", board, results=tmp_path)["model"]) == ["rule-agent-teacher", "rule-agent"]
    with pytest.raises(Skip, match="protocol: no transcripts .* for any model"):
        built("protocol", study(), results=tmp_path)   # nothing benchmarked: not every folder that happens to be there
    with pytest.raises(Skip, match="protocol: no transcripts .* for ghost"):
        built("protocol", study(stats={"bootstrap_models": ["rule-agent", "ghost"]}), results=tmp_path)


def test_protocol_counts_unread_calls_rounds_and_endings_by_kind(root, tmp_path):
    """Four of the teacher's real records edited into the endings a served model can have."""
    _rule_agent_runs(root, tmp_path)
    path = Path(layout.run_path("rule-agent-teacher", "doha", "all", str(tmp_path)))
    header, *records = [json.loads(x) for x in path.read_text().splitlines()][:5]   # the run header, 4 records
    unread = {"name": "route_planner", "arguments": "{oops", "result": None,
              "error": "arguments are not valid JSON: Expecting property name"}
    records[0].update(tool_calls_made=[unread], response=None, error="tool-call budget exhausted", api_rounds=6)
    records[1].update(error="endpoint failed: HTTP 503", api_rounds=1, response=None,
                      tool_calls_made=[], meta={"ending": "infrastructure", "ending_kind": "infrastructure",
                                                          "retryable": True})   # as the runner marks it
    records[2].update(api_rounds=3)
    overflow = {"error": {"code": 400, "message": "request (8301 tokens) exceeds the available context size "
                          "(8192 tokens), try increasing it", "type": "exceed_context_size_error",
                          "n_prompt_tokens": 8301, "n_ctx": 8192}}
    records[3].update(api_rounds=2, response=None, error="400: " + json.dumps(overflow),
                      meta={"ending": "context", "ending_kind": "context", "retryable": False,
                            "context": {"n_prompt_tokens": 8301, "n_ctx": 8192}})   # as the runner marks it
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))
    Path(layout.run_path("rule-agent-teacher", "cta", "all", str(tmp_path))).unlink()
    row = built("protocol", study(stats={"bootstrap_models": ["rule-agent-teacher"]}),
                results=tmp_path).iloc[0].to_dict()
    assert row == {"model": "rule-agent-teacher", "cases": 4, "executed_call_pct": 50.0, "accepted_pct": 50.0,
                   "mean_rounds": 3.0, "ended_pct": 25.0, "model_error_pct": 25.0, "context_error_pct": 25.0,
                   "infrastructure_error_pct": 25.0}
    script = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "protocol_stats.py"),
                             "--runs", layout.runs_root("all", str(tmp_path)), "--model", "rule-agent-teacher"],
                            capture_output=True, text=True)
    assert script.returncode == 0, script.stderr
    assert "| rule-agent-teacher | 4 | 50.0 | 50.0 | 3.0 | 25.0 | 25.0 | 25.0 | 25.0 |" in script.stdout


# --- The tables as published (results/tableN.md), on the paper's own numbers ---------------------

#: Table 2 of the paper: rank, the label as printed, Comp., Tier 1 (../shared/paper-tables.md).
PAPER_TABLE2 = [
    (1, "Muse Glimmer 30B", 92.03, 92.75), (2, "Qwen3.8-27B", 91.83, 92.20), (3, "Qwen3.6-27B", 91.28, 93.63),
    (4, "Qwen3.5-27B base", 90.60, 92.32), (5, "GPT-5.6 luna (medium)", 90.57, 90.63),
    (6, "GPT-5.4 full (xhigh)", 90.45, 91.37), (7, "Qwen3.5-35B-A3B base", 89.90, 92.12),
    (8, "GPT-5.6 sol (xhigh)", 89.82, 90.00), (9, "Qwen3.5-27B + PEFT (n=2)", 89.72, 91.41),
    (10, "Qwen3.5-4B + PEFT (n=2)", 89.12, 91.32), (11, "Qwen3.5-9B + PEFT (n=2)", 88.85, 91.03),
    (12, "GPT-5.4 full (high)", 88.20, 89.48), (13, "Qwen3.5-9B base", 88.05, 89.38),
    (14, "Mistral Small 2603", 87.82, 90.45), (15, "GPT-5.4 full (medium)", 87.72, 89.17),
    (16, "Qwen3.5-4B base", 87.25, 89.32), (17, "GLM-4.7-Flash", 86.73, 89.67), (18, "GPT-5.4-nano", 86.58, 87.10),
    (19, "GPT-5.4-mini", 86.37, 87.57), (20, "Ministral 8B 2512", 85.68, 87.33),
    (21, "Gemma 4 26B-A4B", 81.98, 85.23), (22, "Qwen3.5-2B + PEFT (n=3)", 79.69, 81.20),
    (23, "Qwen3.5-2B base", 71.90, 74.17), (24, "Qwen3.5-0.8B base", 59.98, 61.93),
    (25, "Mistral Nemo 12B", 56.67, 57.50),
]
#: The excluded rows (no numbers in the paper: one a high scorer, to show the rule, not the score, decides)
UNRANKED = {"Llama 3.1-8B": (95.0, 96.0), "Gemma 4 E2B": (40.0, 50.0), "Gemma 4 E4B": (60.0, 70.0)}
REFERENCE = ("Rule-based baseline", 77.1, 84.6)
#: Table 4's per-seed Tier 1 (s42, s43[, s44])
PAPER_SEEDS = {"2b": (76.80, 82.07, 84.74), "4b": (91.82, 90.83), "9b": (90.53, 91.53), "27b": (91.93, 90.88)}
#: Q4_K_M GGUF bytes per size (the paper: 1.2, 2.6, 5.3, 16 GB), adapters (42, 100, 150, 305 MB), minutes a seed
PAPER_SIZES = {"2b": (1_240_000_000, 42_000_000, 27), "4b": (2_610_000_000, 100_400_000, 63),
               "9b": (5_280_000_000, 150_200_000, 74), "27b": (16_400_000_000, 305_000_000, 103)}
PAPER_TABLE4_MD = """\
| Size | Base T1 | s42 | s43 | s44 | mean | Δ vs base | seed spread | Q4_K_M GGUF |
|---|---|---|---|---|---|---|---|---|
| 2B | 74.17 | 76.80 | 82.07 | 84.74 | 81.20 | +7.03 | ±3.97 | 1.2 GB |
| 4B | 89.32 | 91.82 | 90.83 | – | 91.32 | +2.00 | ±0.49 | 2.6 GB |
| 9B | 89.38 | 90.53 | 91.53 | – | 91.03 | +1.65 | ±0.50 | 5.3 GB |
| 27B | 92.32 | 91.93 | 90.88 | – | 91.41 | −0.91 | ±0.53 | 16 GB |
"""
CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


def paper_study(**extra) -> StudyConfig:
    """The paper config's Table 2 and 4 sections (config/config.yaml), plus ``extra`` sections; the
    students without their ``published`` control rows (the config's addition, not the paper's Table 4)."""
    import yaml

    raw = yaml.safe_load(CONFIG.read_text())
    raw["students"] = {size: {k: v for k, v in spec.items() if k != "published"}
                       for size, spec in raw["students"].items()}
    return study(**{key: raw[key] for key in ("leaderboard", "students", "termination") if key in raw}, **extra)


PAPER_SYSTEMS = ("marta", "doha", "bart", "taipei", "cta", "beijing")
PAPER_CASES = 2  # held-out cases per system


def _system_means(target: float) -> list[float]:
    """Six system means (0.1 steps, as the scorer rounds them) whose mean rounds to ``target`` as the paper's."""
    sixtieths = round(target * 60)
    assert round(sixtieths / 60, 2) == round(target, 2), target  # every number of the paper is one of these
    low, extra = divmod(sixtieths, 6)
    return [(low + (i < extra)) / 10 for i in range(6)]


def paper_table(models: dict[str, tuple[float, float, int]]) -> pa.Table:
    """Held-out scores, ``model -> (Tier 1, composite, cases with an error)``, on six systems: each
    case has a Tier 1 component x and a judged Tier 2 one y = 2c - x, so its composite is c."""
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for model, (tier1, composite, errors) in models.items():
        for s, (system, x, c) in enumerate(zip(PAPER_SYSTEMS, _system_means(tier1), _system_means(composite))):
            for i in range(PAPER_CASES):
                case_id = f"{system.upper()}-{'ABCDEFGHIJK'[(s + i) % 11]}-{i:03d}"
                for component, tier, score in (("route_correct", 1, x),
                                               ("advisory_content_correct", 2, round(2 * c - x, 1))):
                    values = {"model": model, "system": system, "case_id": case_id,
                              "category": case_id.split("-")[1], "partition": "holdout", "component": component,
                              "tier": tier, "score": score, "max": 100.0, "judged": tier == 2, "reason": "",
                              "error": "boom" if s == 0 and i < errors else None}
                    for name, value in values.items():
                        rows[name].append(value)
    return pa.table(rows, schema=SCHEMA)


def _seed_values(target: float, near: tuple[float, ...]) -> list[float]:
    """Per-seed headlines (each one of :func:`_system_means`'s) near ``near`` whose mean rounds to ``target``."""
    total = round(target * 60 * len(near))
    ks = [round(v * 60) for v in near[:-1]]
    return [k / 60 for k in [*ks, total - sum(ks)]]


def paper_scores(config: StudyConfig) -> dict[str, tuple[float, float, int]]:
    """The paper's Table 2 as ``paper_table`` models of the config (a student group: its seeds, near Table 4's)."""
    by_label = {row.label: row.model for row in config.leaderboard}
    models: dict[str, tuple[float, float, int]] = {}
    for _, label, comp, t1 in PAPER_TABLE2:
        model = by_label[label.split(" (n=")[0]]
        if model.endswith("-peft"):
            size = model[: -len("-peft")]
            seeds = config.students[size].seeds
            for seed, seed_t1, seed_comp in zip(seeds, _seed_values(t1, PAPER_SEEDS[size]),
                                                _seed_values(comp, (comp,) * len(seeds)), strict=True):
                models[f"{model}-s{seed}"] = (seed_t1, seed_comp, 0)
        else:
            models[model] = (t1, comp, 0)
    for label, (comp, t1) in UNRANKED.items():
        models[by_label[label]] = (t1, comp, 1)  # 11 of 12 cases end: 91.7 % < 98 %
    models[by_label[REFERENCE[0]]] = (REFERENCE[2], REFERENCE[1], 0)
    return models


@pytest.fixture(scope="module")
def paper_cases() -> Cases:
    return load_case_scores(paper_table(paper_scores(paper_study())))


@pytest.fixture
def paper_results(tmp_path: Path) -> Path:
    """Training outputs of the paper's students: GGUF sizes, train metrics, the training set's composition."""
    for size, (gguf, adapter, minutes) in PAPER_SIZES.items():
        for seed in PAPER_SEEDS[size] and paper_study().students[size].seeds:
            folder = tmp_path / "peft" / size / f"seed{seed}"
            _write_json(folder / "gguf_sizes.json", {"model-Q4_K_M.gguf": gguf})
            _write_json(folder / "adapter" / "train_metrics.json",
                        {"recipe": {"max_length": 2048 if size == "27b" else 4096}, "wall_s": 60.0 * minutes,
                         "adapter_bytes": adapter, "adapter_params": adapter // 4, "adapter_dtypes": ["float32"]})
    composition = tmp_path / "teacher" / "composition.csv"
    composition.parent.mkdir(parents=True)
    composition.write_text("category,kept,train_cases,coverage_pct,mean_tier1,from_a\n"
                           "A,91,91,100.0,99.1,50\nC,66,92,71.7,98.7,40\nall,600,717,83.7,99.0,540\n")
    return tmp_path


def test_table2_ranks_the_paper_config_exactly_as_the_paper(paper_cases):
    """The paper's 25 ranked rows, the three excluded ones and the rule baseline, shuffled by the config order."""
    config = paper_study()
    frame = built("table2", config, paper_cases)
    ranked = frame[frame["ranked"]]
    assert ranked[["rank", "composite", "tier1"]].values.tolist() == [[r, c, t] for r, _, c, t in PAPER_TABLE2]
    assert frame["rank"].isna().tolist() == [False] * 25 + [True] * 4
    assert frame["model"].iloc[25:].tolist() == ["Llama 3.1-8B", "Gemma 4 E4B", "Gemma 4 E2B", "Rule-based baseline"]
    assert frame["reference"].tolist() == [False] * 28 + [True]
    assert frame.iloc[-1][["composite", "tier1", "normal_endings_pct", "ranked"]].tolist() == [77.1, 84.6, 100.0, False]
    lines = markdown("table2", frame, printed(config, "table2")).splitlines()
    assert lines[0] == "| Rank | Model | Licence | Vendor | Comp. | Tier 1 |"
    assert [line.split(" | ")[:2] for line in lines[2:27]] == [[f"| {r}", label] for r, label, _, _ in PAPER_TABLE2]
    assert lines[2] == "| 1 | Muse Glimmer 30B | Apache 2.0 | Meta | 92.03 | 92.75 |"
    assert lines[25] == "| 24 | Qwen3.5-0.8B base | Apache 2.0 | Alibaba | 59.98 | 61.93 |"
    assert lines[27] == "| – | Llama 3.1-8B | Llama 3.1 Community | Meta | 95.00 | 96.00 |"
    assert lines[30] == "| ref. | Rule-based baseline | - | - | 77.10 | 84.60 |"
    assert "–: unranked, fewer than 98 % of its cases end with a valid submit." in lines
    assert "ref.: a reference line, not ranked." in lines


def test_table4_markdown_of_the_papers_numbers_is_the_papers_table():
    """The paper's Table 4 numbers in the CSV's columns print as the paper's Table 4, character for character."""
    frame = pd.DataFrame({
        "size": ["2b", "4b", "9b", "27b"], "base_tier1": [74.17, 89.32, 89.38, 92.32],
        "s42": [76.80, 91.82, 90.53, 91.93], "s43": [82.07, 90.83, 91.53, 90.88], "s44": [84.74, None, None, None],
        "mean": [81.20, 91.32, 91.03, 91.41], "delta": [7.03, 2.00, 1.65, -0.91],
        "seed_spread": [3.97, 0.49, 0.50, 0.53], "delta_full": [6.03, 1.72, 1.09, -1.07],
        "q4_k_m_gguf_bytes": [gguf for gguf, _, _ in PAPER_SIZES.values()]})
    assert markdown("table4", frame) == PAPER_TABLE4_MD + "\nFull-matrix deltas: +6.03, +1.72, +1.09, −1.07.\n"


def test_table4_of_the_paper_config_on_synthetic_scores(paper_cases, paper_results):
    frame = built("table4", paper_study(), paper_cases, paper_results)
    assert PUBLISHED_COLUMN not in frame.columns  # no published student configured: no column
    assert frame[["size", "base_tier1", "mean"]].values.tolist() == [
        ["2b", 74.17, 81.2], ["4b", 89.32, 91.32], ["9b", 89.38, 91.03], ["27b", 92.32, 91.41]]
    lines = markdown("table4", frame).splitlines()
    assert lines[:2] == PAPER_TABLE4_MD.splitlines()[:2]
    # (a seed's headline is one of 1/60's steps, so the last seed is moved to give the paper's mean)
    assert re.fullmatch(r"\| 4B \| 89.32 \| 91.82 \| 90.8\d \| – \| 91.32 \| \+2.00 \| ±0.\d\d \| 2.6 GB \|", lines[3])
    assert re.fullmatch(r"\| 27B \| 92.32 \| 91.93 \| 90.\d\d \| – \| 91.41 \| −0.91 \| ±0.\d\d \| 16 GB \|", lines[5])


def test_table4_shows_the_published_student_beside_the_trained_ones(paper_cases, paper_results):
    """students.<size>.published names the paper's released student; blank where unscored or unnamed."""
    models = paper_scores(paper_study())
    models["qwen3.5-4b-metro-v24"] = (91.82, 89.50, 0)
    cases = load_case_scores(paper_table(models))
    raw = paper_study().students
    students = {size: {**spec.model_dump(exclude={"published"}), **(
        {"published": f"qwen3.5-{size}-metro-v24"} if size in ("4b", "27b") else {})} for size, spec in raw.items()}
    config = paper_study().model_copy(update={"students": study(students=students).students})
    frame = built("table4", config, cases, paper_results)
    assert frame[PUBLISHED_COLUMN].fillna(-1).tolist() == [-1, 91.82, -1, -1]  # 27b's is named, has no scores
    assert frame.columns[-1] == PUBLISHED_COLUMN and frame.columns[:-1].tolist() == list(
        built("table4", paper_study(), paper_cases, paper_results).columns)  # the CSV's other columns unchanged
    lines = markdown("table4", frame).splitlines()
    assert lines[0] == PAPER_TABLE4_MD.splitlines()[0] + " published s42 |"
    assert lines[3].endswith(" | 2.6 GB | 91.82 |") and lines[2].endswith(" | 1.2 GB | – |")


def _write_parquet(table: pa.Table, root: Path) -> Path:
    """The synthetic rows as the scorer stores them: one Parquet file per model and system."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from metrobench.scoring.store import FILE_SCHEMA, partition_path

    for model in set(table.column("model").to_pylist()):
        for system in set(table.column("system").to_pylist()):
            rows = table.filter(pc.and_(pc.equal(table["model"], model), pc.equal(table["system"], system)))
            path = partition_path(root, model, system)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows.select(FILE_SCHEMA.names), path)
    return root


PAPER_HEADERS = {
    "table2": "| Rank | Model | Licence | Vendor | Comp. | Tier 1 |",
    "table3": "| decoding, output budget | Qwen3.5-27B | Qwen3.6-27B | Qwen3.8-27B |",
    "table4": "| Size | Base T1 | s42 | s43 | s44 | mean | Δ vs base | seed spread | Q4_K_M GGUF |",
    "table7": "| Category | Kept | Train-partition cases | Coverage |",
    "table8": "| Size | max_seq | time/seed | adapter | Q4_K_M GGUF |",
    "table9": "| Model | T1 mean [95 % CI] | Comp. mean [95 % CI] |",
    "table10": "| Comparison | ΔT1 held-out (n=12) | ΔT1 full (n=12) | ΔComp. full (n=12) |",
}


def test_metrobench_tables_writes_each_table_md_with_the_papers_header(paper_results, tmp_path):
    """`metrobench tables` from real Parquet: each tableN.md opens with the paper's header, the CSV keeps its columns."""
    from metrobench.paper.report import build_tables

    sensitivity = [{"row": row, "column": column, "model": model}
                   for row, models in (("greedy, 4096", ("qwen3.5-27b", "qwen3.6-27b", "qwen3.8-27b")),
                                       ("greedy, 16384", ("qwen3.5-27b", "qwen3.6-27b", "qwen3.8-27b")))
                   for column, model in zip(("Qwen3.5-27B", "Qwen3.6-27B", "Qwen3.8-27B"), models)]
    config = paper_study(sensitivity=sensitivity, stats={
        "n_resamples": 100, "bootstrap_models": ["qwen3.5-27b", "4b-peft"],
        "comparisons": [["4b-peft", "gpt-5.4-xhigh"], ["27b-peft", "qwen3.5-27b"]]})
    scores = _write_parquet(paper_table(paper_scores(config)), tmp_path / "scores")
    written, skipped = build_tables(scores, config, paper_results,
                                    only=[*PAPER_HEADERS, "figure2", "figure5"])
    assert skipped == []
    for name, header in PAPER_HEADERS.items():
        assert (paper_results / f"{name}.md").read_text().splitlines()[0] == header, name
    csv = {name: pd.read_csv(paper_results / f"{name}.csv") for name in PAPER_HEADERS}
    assert list(csv["table2"].columns) == ["rank", "model", "licence", "vendor", "composite", "composite_upper",
                                          "judged", "tier1", "seeds", "normal_endings_pct", "ranked", "reference",
                                          "holdout_cases"]
    assert list(csv["table4"].columns) == ["size", "base_tier1", "s42", "s43", "s44", "mean", "delta",
                                          "seed_spread", "delta_full", "q4_k_m_gguf_bytes"]
    assert (paper_results / "table8.md").read_text().splitlines()[2:] == [
        "| 2B | 4096 | 27 min | 42 MB | 1.2 GB |", "| 4B | 4096 | 63 min | 100 MB | 2.6 GB |",
        "| 9B | 4096 | 74 min | 150 MB | 5.3 GB |", "| 27B | 2048 | 103 min | 305 MB | 16 GB |", "",
        "Adapters (LoRA weights as trained and saved): 2B 10.5 M parameters in float32, 42 MB (paper: 42 MB); "
        "4B 25.1 M parameters in float32, 100 MB (paper: 100 MB); 9B 37.5 M parameters in float32, 150 MB "
        "(paper: 150 MB); 27B 76.2 M parameters in float32, 305 MB (paper: 305 MB)."]
    assert list(csv["table8"].columns) == ["size", "max_seq", "minutes_per_seed", "adapter_bytes", "adapter_params",
                                          "adapter_dtypes", "paper_adapter_bytes", "q4_k_m_gguf_bytes",
                                          "gguf_llama_cpp", "seeds"]
    assert (paper_results / "table7.md").read_text().splitlines()[2:] == [
        "| A | 91 | 91 | 100 % |", "| C | 66 | 92 | 72 % |", "| All | 600 | 717 | 84 % |"]
    table9_md = (paper_results / "table9.md").read_text().splitlines()
    assert re.fullmatch(r"\| Qwen3.5-27B base \| 92.32 \[92.\d\d, 92.\d\d\] \| 90.60 \[90.\d\d, 90.\d\d\] \|", table9_md[2])
    assert len(csv["table9"]) == 8 and len(table9_md) == 6  # the CSV's holdout and headline rows stay there
    # as the paper's -0.05 (4B+PEFT vs GPT-5.4 xhigh), and the composite 89.12 - 90.45
    assert re.fullmatch(r"\| Qwen3.5-4B \+ PEFT vs GPT-5.4 full \(xhigh\) \| −0.0\d \[−0.\d\d, [+−]0.\d\d\] "
                        r"\| −0.0\d \[.*\] \| −1.33 \[−1.\d\d, −1.\d\d\] \|",
                        (paper_results / "table10.md").read_text().splitlines()[2])


def test_table9_and_10_markdown_print_mean_and_interval(cases):
    config = study(students=STUDENTS, stats=STATS, leaderboard=[{"model": "m1", "label": "Model one"}])
    both = built("table9", config, cases)
    assert markdown("table9", holdout(both), printed(config, "table9")).splitlines()[2:4] == [
        "| Model one | 75.00 [65.00, 85.00] | 87.50 [82.50, 92.50] |",
        "| small-peft | 75.00 [65.00, 85.00] | 37.50 [32.50, 42.50] |"]
    assert "| Model one | 75.00 [65.00, 85.00]" not in markdown("table9", both, printed(config, "table9"))  # full
    lines = markdown("table10", built("table10", config, cases), printed(config, "table10")).splitlines()
    assert lines[2] == "| small-peft vs m2 | −25.00 [−35.00, −15.00] | −9.00 [−32.00, +25.00] | −4.50 [−16.00, +12.50] |"
    assert lines[3].startswith("| Model one vs m2 | −25.00 [−35.00, −15.00] |")


def test_an_unjudged_composite_is_printed_as_its_bounds(cases):
    frame = built("table2", study(leaderboard=[{"model": "m2", "label": "M2"}]), cases)
    lines = markdown("table2", frame).splitlines()
    assert lines[2] == "| 1 | M2 |  |  | 50.00–100.00 | 100.00 |"
    assert lines[-1] == "Comp. as low–high: Tier 2 not judged, counted at zero and at its maximum."


@pytest.mark.slow
def test_the_workflow_scores_the_published_student_for_table4(tmp_path):
    """students.<size>.published adds that model's judge-free scores to Table 4's inputs (a dry run)."""
    from test_workflow import job_counts, snakemake, workflow_copy

    cwd = workflow_copy(tmp_path)
    (cwd / "published.yaml").write_text("students: {smollm2: {published: rule-agent}}\n")
    plans = [snakemake(cwd, "-n", "--forceall", "results/table4.csv", "--configfile", "config/demo.yaml", *extra)
             for extra in ((), ("published.yaml",))]
    assert all(plan.returncode == 0 for plan in plans), plans[1].stderr[-2000:]
    plain, published = (job_counts(plan.stdout) for plan in plans)
    assert published["score"] == plain["score"] + 1    # the rule agent's held-out view, judge-free, one job
    assert published["run"] == plain["run"] + 6
    assert "scores/tier1/holdout/model=rule-agent/system=marta" in plans[1].stdout
    assert "scores/tier1/holdout/model=rule-agent" not in plans[0].stdout


def test_a_configured_note_is_printed_under_its_markdown_table_and_the_demo_says_what_it_shows():
    from metrobench.paper.markdown import markdown

    config = study(report={"notes": {"protocol": "A miniature: read with care."}})
    frame = pd.DataFrame({"model": ["m"], "cases": [3]})
    assert markdown("protocol", frame, printed(config, "protocol")) == \
        "| model | cases |\n|---|---|\n| m | 3 |\n\nA miniature: read with care.\n"
    assert markdown("protocol", frame, printed(study(), "protocol")).endswith("| m | 3 |\n")
    assert printed(config, "table2").note is None    # a note is its own table's only
    demo = load_study([CONFIG.parent / "demo.yaml"]).report.notes
    assert demo["table4"] == demo["table10"]
    assert "not whether distillation works" in demo["table10"] and "`make mini-study`" in demo["table10"]


def _runs(results: Path, model: str, max_tokens: dict[str, int]) -> None:
    """A model's view transcripts as the runner writes them: settings and fingerprint in every record."""
    from metrobench.transcripts.records import CaseRecord, TranscriptWriter

    for system, budget in max_tokens.items():
        path = Path(layout.run_path(model, system, "all", str(results)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)                              # this system run anew
        settings = {"provider": "llama_cpp", "temperature": 0.0, "max_tokens": budget, "max_rounds": 20}
        with TranscriptWriter(path) as writer:
            for case_id in (c for c in [*HOLDOUT, TRAIN] if c.lower().startswith(system)):
                writer.write(CaseRecord(case_id=case_id, model=model, system=system,
                                        meta={"settings": settings, "config": f"fp{budget}"}))


def test_table2_refuses_a_model_whose_systems_ran_under_different_settings(tmp_path, capsys):
    """Issue 41: m1's bart view stale at max_tokens 512 while marta reran at 256: one line naming both."""
    from metrobench.cli import main

    scores = _write_parquet(synthetic_table(), tmp_path / "scores")
    config = tmp_path / "study.yaml"
    config.write_text(json.dumps({"leaderboard": [{"model": "m1"}, {"model": "m2"}]}))
    argv = ["tables", "--scores", str(scores), "--config", str(config), "--out", str(tmp_path), "--only", "table2"]
    _runs(tmp_path, "m1", {"bart": 256, "marta": 256})
    _runs(tmp_path, "m2", {"bart": 4096, "marta": 4096})
    assert main(argv) == 0
    made = (tmp_path / "table2.csv").read_bytes()
    assert sorted(pd.read_csv(tmp_path / "table2.csv")["model"]) == ["m1", "m2"]
    _runs(tmp_path, "m1", {"bart": 512})
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "metrobench: error: model m1: its runs disagree on their settings: max_tokens 512 on bart, 256 on marta; "
        "rerun the model's runs under one config (the workflow reruns a changed model's runs; "
        "`metrobench bench --set-aside` keeps the old ones)\n")
    assert (tmp_path / "table2.csv").read_bytes() == made         # the old table stays, none half-written


@pytest.mark.parametrize("only, config, why", [
    ("table2", {}, "built nothing: table2:"),                          # no leaderboard: Table 2 skipped, said why
    ("table99", {"leaderboard": [{"model": "m1"}]}, "built nothing: no table or figure has that name"),
])
def test_tables_only_that_builds_nothing_fails_saying_why(tmp_path, capsys, only, config, why):
    # issue 44: `--only` names what the caller (a rule) needs; building none of it is an error
    from metrobench.cli import main

    scores = _write_parquet(synthetic_table(), tmp_path / "scores")
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(config))
    assert main(["tables", "--scores", str(scores), "--config", str(path), "--out", str(tmp_path),
                 "--only", only]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"metrobench: error: tables: --only {only} built nothing") and why in err, err
    assert err.count("\n") == 1 and not list(tmp_path.glob("table*"))



def test_the_registry_names_what_each_table_reads_once_for_the_workflow_and_the_command():
    """Issue 42: one declaration per table; the rules' inputs and `metrobench tables` read it."""
    from metrobench.paper import registry

    demo = load_study([CONFIG.parent / "demo.yaml"])
    assert registry.inputs(demo, "figure3") == registry.inputs(demo, "categories")
    table4 = registry.inputs(demo, "table4")
    assert all(p.startswith("results/scores/tier1/holdout/") for p in table4 if p.endswith(".parquet"))
    assert "results/peft/smollm2/seed42/gguf_sizes.json" in table4
    assert registry.table_scores_root(demo, "figure-deployment", "out") == "out/scores/tier1/holdout"
    assert registry.table_scores_root(demo, "table9", "out") == "out/scores/tier2/holdout"  # bench.partition
    # Table 9's models: the listed ones, student groups as their seeds, 6 systems each
    models = {p.split("model=")[1].split("/")[0] for p in registry.inputs(demo, "table9")}
    assert models == set(demo.members(demo.stats.bootstrap_models))
    assert len(registry.inputs(demo, "table9")) == 6 * len(models)
    assert set(registry.FIGURES[f].table for f in registry.FIGURES) <= set(registry.TABLES)


@pytest.mark.parametrize("config", ["config.yaml", "demo.yaml"])
def test_the_models_a_builder_is_given_are_the_runs_the_workflow_reads(config):
    """Issue 42: the registry resolves a builder's models from the same config the rules' inputs come
    from; on the paper and demo configs, the runs of the one are the scores of the other."""
    from metrobench.paper import registry

    study = load_study([CONFIG.parent / config])
    given = sources(study)

    def runs(models) -> list[str]:
        return [r for m in models for r in m.runs]

    def reads(name: str) -> list[str]:
        return registry.TABLES[name].scores(study)

    assert runs(row.model for row in given.leaderboard()) == reads("table2")
    assert runs(given.stats_models(study.stats.bootstrap_models)) == reads("table9") == reads("protocol")
    assert runs(given.stats_models(study.stats.category_models)) == reads("categories")
    assert runs(m for pair in given.comparisons() for m in pair) == reads("table10")
    assert runs(given.repeated()) == reads("repeats")
    assert [c.model for c in given.cells()] == reads("table3")
    students = given.students()
    assert [s.model for st in students for s in st.seeds] == registry._students(study)
    assert {str(s.gguf_sizes) for st in students for s in st.seeds} == {
        p for p in registry.inputs(study, "table4") if p.endswith("gguf_sizes.json")}
    assert runs(row.model for row in given.leaderboard() if not row.reference) == registry._deployment(study)

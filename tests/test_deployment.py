"""The deployment table, quality against cost and its figure, from synthetic transcripts and scores."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from metrobench import layout
from metrobench.paper import figures
from metrobench.paper.deployment import COLUMNS, case_cost, deployment, pareto_front
from metrobench.paper.report import build_tables
from metrobench.paper.tables import Skip
from metrobench.scoring.judge import AnthropicBackend, Judge, JudgeCache
from metrobench.scoring.rubrics import JudgeTask
from metrobench.scoring.store import SCHEMA
from metrobench.stats.cases import load_case_scores
from metrobench.study import Price, StudyConfig
from metrobench.transcripts.records import CaseRecord, write_transcript
from metrobench.standins.messages_api import FakeMessagesAPI
from table_helpers import built, sources

LOCAL_SERVING = {"gguf": "m.gguf", "gguf_sha256": "ab" * 32, "parallel": 2, "n_gpu_layers": 99}
STUDENT_SERVING = {"gguf": layout.QUANTIZED_GGUF, "parallel": 1, "n_gpu_layers": 0}


def record(case_id: str, model: str, prompt: int, completion: int, e2e_ms: float, rounds: int,
           settings: dict, serving: dict | None = None, **meta) -> CaseRecord:
    meta = {"settings": settings, **({"serving": serving} if serving else {}), **meta}
    return CaseRecord(case_id=case_id, model=model, system="marta", input_tokens=prompt,
                      output_tokens=completion, e2e_ms=e2e_ms, api_rounds=rounds, meta=meta)


def transcripts(results: Path) -> None:
    """loc (local, GPU, 2 slots), api (hosted, priced, reasoning), free (hosted, unpriced), tiny-peft (2 seeds)."""
    llama = {"provider": "llama_cpp"}
    runs = {
        "loc": [record("MARTA-A-001", "loc", 100, 10, 2000, 2, llama, LOCAL_SERVING, model_ms=1800),
                record("MARTA-B-001", "loc", 300, 30, 4000, 1, llama, LOCAL_SERVING, model_ms=3800),
                # the endpoint failed: a rerun redoes it, so it is not a case the model ran
                record("MARTA-C-001", "loc", 999, 999, 99000, 9, llama, LOCAL_SERVING, model_ms=1,
                       ending="infrastructure")],
        "api": [record("MARTA-A-001", "api", 1000, 500, 10000, 4, {"provider": "openai", "model": "gpt-x-2026"},
                       reasoning_tokens=200),
                record("MARTA-B-001", "api", 3000, 1500, 30000, 5, {"provider": "openai", "model": "gpt-x-2026"},
                       reasoning_tokens=600)],
        "free": [record("MARTA-A-001", "free", 50, 5, 1000, 1, {"provider": "mistral", "model": "m"})],
        "tiny-peft-s1": [record("MARTA-A-001", "tiny-peft-s1", 10, 1, 500, 1, llama, STUDENT_SERVING,
                                model_ms=400)],
        "tiny-peft-s2": [record("MARTA-A-001", "tiny-peft-s2", 30, 3, 1500, 3, llama, STUDENT_SERVING,
                                model_ms=1200)],
    }
    for model, records in runs.items():
        write_transcript(Path(layout.run_path(model, "marta", "all", str(results))), records)
    for seed, size in ((1, 1000), (2, 2000)):
        path = Path(layout.quantized_gguf("tiny", seed, str(results)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    transcripts(out)
    (tmp_path / "m.gguf").write_bytes(b"\0" * 1234)
    return out


def config(tmp_path: Path, **extra) -> StudyConfig:
    return StudyConfig.model_validate({
        "systems": ["marta", "bart"],
        "models": {"loc": {"provider": "llama_cpp", "serving": {"gguf": str(tmp_path / "m.gguf")}},
                   "api": {"provider": "openai", "model": "gpt-x-2026"},
                   "free": {"provider": "mistral", "model": "m"}},
        "students": {"tiny": {"base_model": "loc", "recipe": "tiny.yaml", "seeds": [1, 2]}},
        "leaderboard": [{"model": "loc", "label": "Local"}, {"model": "api"}, {"model": "free"},
                        {"model": "tiny-peft", "label": "Tiny + PEFT"},
                        {"model": "rule-agent", "reference": True}],
        "prices": {"gpt-x-*": {"input": 2, "output": 10, "reasoning": 20, "read": "2026-03-01"},
                   "claude-judge*": {"input": 1, "output": 5, "read": "2026-02-01", "source": "https://x"}},
        "stats": {"n_resamples": 1000, "seed": 42}, **extra})


def judge_cache(scores: Path) -> None:
    cache = JudgeCache(scores.with_name(scores.name + ".judge-cache.jsonl"))
    for key, usage in (("a", {"input_tokens": 400, "output_tokens": 20}),
                       ("b", {"input_tokens": 600, "output_tokens": 40}), ("c", None)):
        entry = {"component": "x", "case_id": "MARTA-A-001", "judge_model": "claude-judge-1",
                 "score": 2, "reason": "", "raw": "Score: 2"}
        cache.put(key, entry if usage is None else {**entry, "usage": usage})


def test_every_column_from_the_transcripts_and_the_judge_apart(tmp_path, results):
    scores = results / "scores"
    judge_cache(scores)
    frame = built("deployment", config(tmp_path), results=results, scores=scores)
    assert list(frame.columns) == list(COLUMNS)
    rows = {row["model"]: row for row in frame.to_dict("records")}
    assert list(rows) == ["Local", "api", "free", "Tiny + PEFT", "claude-judge-1"]  # no reference row
    na = None

    def check(name: str, expected: dict) -> None:
        got = {k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v)
               for k, v in rows[name].items()}
        assert got == {"model": name, **expected}

    # percentiles are numpy's linear ones: p95 of (a, b) = a + 0.95 (b - a)
    check("Local", {"kind": "local", "cases": 2, "prompt_tokens_mean": 200.0, "prompt_tokens_p95": 290.0,
                    "completion_tokens_mean": 20.0, "completion_tokens_p95": 29.0, "reasoning_tokens_mean": na,
                    "reasoning_tokens_p95": na, "case_s_p50": 3.0, "case_s_p95": 3.9,
                    "round_s_p50": 2.5, "round_s_p95": 3.85,  # 2 s over 2 rounds, 4 s over 1
                    "gguf_bytes": 1234, "served_on": "gpu",
                    "gpu_s_per_case": 1.4,  # (1.8 + 3.8) / 2 slots / 2 cases
                    "usd_per_1k_cases": na, "prices_read": na})
    # (1000 x 2 + 300 x 10 + 200 x 20) / 1e6 = 0.009; (3000 x 2 + 900 x 10 + 600 x 20) / 1e6 = 0.027
    check("api", {"kind": "hosted", "cases": 2, "prompt_tokens_mean": 2000.0, "prompt_tokens_p95": 2900.0,
                  "completion_tokens_mean": 1000.0, "completion_tokens_p95": 1450.0,
                  "reasoning_tokens_mean": 400.0, "reasoning_tokens_p95": 580.0, "case_s_p50": 20.0,
                  "case_s_p95": 29.0, "round_s_p50": 4.25, "round_s_p95": 5.825, "gguf_bytes": na,
                  "served_on": na, "gpu_s_per_case": na, "usd_per_1k_cases": 18.0, "prices_read": "2026-03-01"})
    check("free", {"kind": "hosted", "cases": 1, "prompt_tokens_mean": 50.0, "prompt_tokens_p95": 50.0,
                   "completion_tokens_mean": 5.0, "completion_tokens_p95": 5.0, "reasoning_tokens_mean": na,
                   "reasoning_tokens_p95": na, "case_s_p50": 1.0, "case_s_p95": 1.0, "round_s_p50": 1.0,
                   "round_s_p95": 1.0, "gguf_bytes": na, "served_on": na, "gpu_s_per_case": na,
                   "usd_per_1k_cases": na, "prices_read": na})  # not priced: empty, never guessed
    # a group pools its seeds' cases; its GGUF size is the mean of its seeds' files
    check("Tiny + PEFT", {"kind": "local", "cases": 2, "prompt_tokens_mean": 20.0, "prompt_tokens_p95": 29.0,
                          "completion_tokens_mean": 2.0, "completion_tokens_p95": 2.9,
                          "reasoning_tokens_mean": na, "reasoning_tokens_p95": na, "case_s_p50": 1.0,
                          "case_s_p95": 1.45, "round_s_p50": 0.5, "round_s_p95": 0.5, "gguf_bytes": 1500,
                          "served_on": "cpu", "gpu_s_per_case": 0.8, "usd_per_1k_cases": na, "prices_read": na})
    # three judgments paid for; tokens of the two that recorded them; (400 + 100) / 1e6 and (600 + 200) / 1e6
    check("claude-judge-1", {"kind": "judge", "cases": 3, "prompt_tokens_mean": 500.0, "prompt_tokens_p95": 590.0,
                             "completion_tokens_mean": 30.0, "completion_tokens_p95": 39.0,
                             "reasoning_tokens_mean": na, "reasoning_tokens_p95": na, "case_s_p50": na,
                             "case_s_p95": na, "round_s_p50": na, "round_s_p95": na, "gguf_bytes": na,
                             "served_on": na, "gpu_s_per_case": na, "usd_per_1k_cases": 0.65,
                             "prices_read": "2026-02-01"})


def test_cost_arithmetic_and_a_served_file_that_is_not_the_recorded_one(tmp_path, results):
    price = Price(input=2, output=10, read="2026-03-01")
    assert case_cost(price, 1000, 500, 200) == pytest.approx(0.007)  # no reasoning price: output tokens
    assert case_cost(price.model_copy(update={"reasoning": 20}), 1000, 500, None) == pytest.approx(0.007)
    assert case_cost(price.model_copy(update={"reasoning": 0}), 1000, 500, 500) == pytest.approx(0.002)
    # the config now serves another file than the records name: its size is not this run's
    (tmp_path / "other.gguf").write_bytes(b"\0" * 7)
    served = {"provider": "llama_cpp", "serving": {"gguf": str(tmp_path / "other.gguf")}}
    moved = config(tmp_path, models={"loc": served, "api": {"provider": "openai"}, "free": {"provider": "mistral"}})
    given = sources(moved, results=results)
    assert given.footprints()["loc"].gguf == tmp_path / "other.gguf"
    frame = deployment(given.leaderboard(), given.runs(), given.footprints(), given.prices())
    local = frame[frame["model"] == "Local"].iloc[0]
    assert local["gguf_bytes"] is pd.NA and local["gpu_s_per_case"] == 1.4
    assert set(frame["kind"]) == {"local", "hosted"}  # no judge cache given: no judge rows
    with pytest.raises(Skip, match="deployment: no runs for nothing-ran"):
        built("deployment", config(tmp_path, leaderboard=[{"model": "nothing-ran"}]), results=results)


def test_the_judge_keeps_the_tokens_its_endpoint_billed(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-never-logged")
    with FakeMessagesAPI(lambda prompt: "Score: 2 | fine") as api:
        judge = Judge(AnthropicBackend(base_url=api.url), JudgeCache(tmp_path / "cache.jsonl"))
        task = JudgeTask("scope_adherence", "MARTA-A-001", "p" * 400, "answer", lambda s: float(s))
        [verdict] = judge.resolve([task])
    assert verdict["score"] == 2
    [entry] = JudgeCache(tmp_path / "cache.jsonl").entries.values()
    prompt = api.requests[0]["body"]["messages"][0]["content"]
    assert entry["usage"] == {"input_tokens": len(prompt) // 4, "output_tokens": len("Score: 2 | fine") // 4}


HELD = ("MARTA-A-001", "MARTA-B-001", "BART-A-001", "BART-B-001")
TIER1 = {"loc": (40, 60, 50, 50), "api": (90, 90, 90, 90), "free": (70, 70, 70, 70),
         "tiny-peft-s1": (70, 90, 70, 90), "tiny-peft-s2": (90, 70, 90, 70)}


def scores_table() -> pa.Table:
    """One Tier 1 component per held-out case, the values of TIER1."""
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for model, values in TIER1.items():
        for case_id, value in zip(HELD, values):
            row = {"model": model, "system": case_id.split("-")[0].lower(), "case_id": case_id,
                   "category": case_id.split("-")[1], "partition": "holdout", "component": "route_correct",
                   "tier": 1, "score": float(value), "max": 100.0, "judged": False, "reason": "", "error": None}
            for name, value_ in row.items():
                rows[name].append(value_)
    return pa.table(rows, schema=SCHEMA)


def test_pareto_front_is_the_undominated_points():
    points = [(1.0, 50.0), (2.0, 80.0), (3.0, 70.0), (2.0, 80.0), (0.5, 10.0), (4.0, 90.0), (4.0, 85.0)]
    assert pareto_front(points) == [True, True, False, True, True, True, False]
    assert pareto_front([]) == []


def test_quality_against_cost_and_its_figure(tmp_path, results, monkeypatch):
    frame = built("quality_cost", config(tmp_path), load_case_scores(scores_table()), results)
    got = frame.drop(columns=["tier1_lo", "tier1_hi"]).astype(object).where(frame.notna(), None)
    assert got.values.tolist() == [
        ["Local", "local", 50.0, 1234, None, True],
        ["api", "hosted", 90.0, None, 18.0, True],
        ["free", "hosted", 70.0, None, None, False],   # unpriced: off the cost axis, never on the front
        ["Tiny + PEFT", "local", 80.0, 1500, None, True],
    ]
    assert (frame["tier1_lo"] <= frame["tier1"]).all() and (frame["tier1"] <= frame["tier1_hi"]).all()
    assert frame.loc[0, "tier1_lo"] < 50 < frame.loc[0, "tier1_hi"]       # Local's cases vary
    assert frame.loc[3, "tier1_lo"] == frame.loc[3, "tier1_hi"] == 80     # the seeds' mean is 80 on every case
    drawn = []
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: (drawn.append(fig), save(fig, path)))
    path = tmp_path / "figure-deployment.png"
    figures.figure_deployment(frame, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    local, hosted = drawn[0].axes
    front = [c for c in local.collections if c.get_label() == "Pareto front"][0]
    assert front.get_offsets().tolist() == [[1234 / 1e9, 50.0], [1500 / 1e9, 80.0]]
    assert [t.get_text() for t in hosted.texts] == ["api"]
    assert (local.get_xlabel(), hosted.get_xlabel()) == ("GGUF size on disk (GB)",
                                                         "USD per 1,000 cases (config prices)")


def test_report_builds_the_table_and_the_figure(tmp_path, results):
    scores = tmp_path / "scores-tier1"
    written, skipped = build_tables(scores, config(tmp_path), results, only=["deployment"])
    assert [p.name for p in written] == ["deployment.csv"] and not skipped
    assert (results / "deployment.md").read_text().startswith("| model")
    assert pd.read_csv(results / "deployment.csv")["usd_per_1k_cases"].isna().tolist() == [True, False, True, True]


@pytest.mark.slow
def test_the_demo_plans_the_deployment_table_and_figure(tmp_path):
    from test_workflow import snakemake, workflow_copy

    cwd = workflow_copy(tmp_path)
    plan = snakemake(cwd, "results/deployment.csv", "results/figure-deployment.png", "-n", "--configfile",
                     "config/demo.yaml")
    assert plan.returncode == 0, plan.stderr
    assert "results/deployment.csv" in plan.stdout and "results/figure-deployment.png" in plan.stdout
    assert "results/runs/holdout/smollm2-peft-s43/marta.jsonl" in plan.stdout
    assert "results/scores/tier1/holdout/model=smollm2-135m/system=marta/part.parquet" in plan.stdout
    everything = snakemake(cwd, "-n", "--configfile", "config/demo.yaml")
    assert "results/deployment.csv" in everything.stdout

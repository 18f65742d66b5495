"""Repeated runs (issue 32): ``repeats: k`` on a model entry, the run-to-run table, the bootstrap over runs.

Scores are real Parquet partitions read back by ``metrobench tables``' own path (build_tables);
transcripts are real JSONL records; the resumed repeat runs over real HTTP against the
OpenAI-compatible stand-in, as tests/test_views.py does.

Synthetic data: two systems, four held-out cases and one train case; every case has one
Tier 1 component of maximum 100 scored ``x`` (so its Tier 1 percent is ``x``) and one Tier 2
component scored 100. Model ``m`` runs three times, ``n`` twice, ``solo`` once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import workflow_copy
from metrobench import layout
from metrobench.cli import main
from metrobench.paper.report import build_tables
from metrobench.scoring.store import SCHEMA, read_scores
from metrobench.stats.bootstrap import bootstrap, bootstrap_stratified, paired_bootstrap
from metrobench.stats.cases import load_case_scores
from metrobench.study import StudyConfig
from metrobench.transcripts.records import CaseRecord, read_run, write_transcript
from metrobench.standins.openai_api import FakeOpenAI, chat_payload
from table_helpers import built

REPO = Path(__file__).resolve().parents[1]
HOLDOUT = ("MARTA-A-001", "MARTA-B-001", "BART-A-001", "BART-C-001")
TRAIN = "MARTA-C-001"
CASES = (*HOLDOUT, TRAIN)
#: run -> Tier 1 of HOLDOUT then TRAIN, and the cases whose submission the kiosk accepted
RUNS: dict[str, tuple[tuple[float, ...], set[str]]] = {
    "m": ((80, 60, 100, 40, 70), {"MARTA-A-001", "MARTA-B-001", "BART-A-001", TRAIN}),
    "m-rep2": ((80, 60, 100, 60, 70), {"MARTA-A-001", "BART-A-001", "BART-C-001", TRAIN}),
    "m-rep3": ((80, 80, 100, 40, 20), {"MARTA-A-001", "MARTA-B-001", "BART-A-001"}),
    "n": ((100,) * 5, set(CASES)),
    "n-rep2": ((100,) * 5, set(CASES)),
    "solo": ((0,) * 5, set()),
}
SUBMIT = "submit_assistant_state"


def system_of(case_id: str) -> str:
    return "marta" if case_id.startswith("MARTA") else "bart"


def score_table(model: str, system: str, tier1: dict[str, float]) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for case_id, x in tier1.items():
        for component, tier, score in (("route_correct", 1, x), ("advisory_content_correct", 2, 100.0)):
            values = {"model": model, "system": system, "case_id": case_id, "category": case_id.split("-")[1],
                      "partition": "train" if case_id == TRAIN else "holdout", "component": component,
                      "tier": tier, "score": float(score), "max": 100.0, "judged": tier == 2, "reason": "",
                      "error": None}
            for name, value in values.items():
                rows[name].append(value)
    return pa.table(rows, schema=SCHEMA)


def record(model: str, case_id: str, accepted: bool) -> CaseRecord:
    call = {"name": SUBMIT, "arguments": {}, "error": None if accepted else "422: not accepted"}
    return CaseRecord(case_id=case_id, model=model, system=system_of(case_id), tool_calls_made=[call])


def write_results(results: Path, runs: dict = RUNS) -> Path:
    """Each run's Parquet scores (one partition per model and system) and its transcripts (the all view)."""
    scores = Path(layout.scores_root("all", root=str(results)))
    for model, (tier1, accepted) in runs.items():
        for system in ("marta", "bart"):
            ids = [c for c in CASES if system_of(c) == system]
            path = Path(layout.score_partition(str(scores), model, system))
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(score_table(model, system, {c: tier1[CASES.index(c)] for c in ids}), path)
            write_transcript(Path(layout.run_path(model, system, "all", str(results))),
                             [record(model, c, c in accepted) for c in ids])
    return scores


def study(**sections) -> StudyConfig:
    models = {"m": {"provider": "llama_cpp", "repeats": 3}, "n": {"provider": "llama_cpp", "repeats": 2},
              "solo": {"provider": "llama_cpp"}}
    return StudyConfig.model_validate({"systems": ["marta", "bart"], "models": models, **sections})


COLUMNS = ["model", "partition", "runs", "cases", "tier1_r1", "tier1_r2", "tier1_r3", "tier1_mean", "tier1_sd",
           "tier1_range", "accepted_pct", "pass_k_pct"]


def test_the_run_to_run_table_from_parquet_scores_and_transcripts(tmp_path):
    results = tmp_path / "results"
    scores = write_results(results)
    written, skipped = build_tables(scores, study(), results, only=["repeats"])
    assert skipped == [] and written == [results / "repeats.csv"]
    frame = pd.read_csv(results / "repeats.csv")
    assert list(frame.columns) == COLUMNS
    # m held out: marta (80+60)/2, (80+60)/2, (80+80)/2; bart (100+40)/2, (100+60)/2, (100+40)/2
    #   -> 70, 75, 75: mean 73.33, SD sqrt(((10/3)^2 + 2 (5/3)^2) / 2) = 2.89, range 5
    # m full: marta adds the train case (70, 70, 20): marta 70, 70, 60, so 70, 75, 65; mean 70, SD 5, range 10
    # accepted (held out): 3 of 4 in each run; in all three runs only MARTA-A and BART-A: 50 %
    # accepted (full): 4, 4 and 3 of 5 (73.3 %); the train case fails in run 3: 2 of 5 (40 %)
    # n: two runs of 100 everywhere, all accepted; no third run (blank)
    expected = [
        ["m", "holdout", 3, 4, 70.0, 75.0, 75.0, 73.33, 2.89, 5.0, 75.0, 50.0],
        ["m", "full", 3, 5, 70.0, 75.0, 65.0, 70.0, 5.0, 10.0, 73.3, 40.0],
        ["n", "holdout", 2, 4, 100.0, 100.0, None, 100.0, 0.0, 0.0, 100.0, 100.0],
        ["n", "full", 2, 5, 100.0, 100.0, None, 100.0, 0.0, 0.0, 100.0, 100.0],
    ]
    got = frame.astype(object).where(frame.notna(), None).values.tolist()
    assert got == expected
    markdown = (results / "repeats.md").read_text()
    assert markdown.splitlines()[0] == ("| Model | Partition | k | Cases | T1 run 1 | T1 run 2 | T1 run 3 | T1 mean "
                                        "| SD | range | pass^k |")
    assert "| m | held-out | 3 | 4 | 70.00 | 75.00 | 75.00 | 73.33 | 2.89 | 5.00 | 50.0 % |" in markdown
    assert "| n | full | 2 | 5 | 100.00 | 100.00 | – | 100.00 | 0.00 | 0.00 | 100.0 % |" in markdown


def test_no_repeats_no_table_and_missing_runs_skip(tmp_path):
    results = tmp_path / "results"
    scores = write_results(results, {k: v for k, v in RUNS.items() if k != "m-rep3"})
    _, skipped = build_tables(scores, study(), results, only=["repeats"])
    assert skipped == ["repeats: no scores for m-rep3"]
    plain = StudyConfig.model_validate({"models": {"solo": {"provider": "llama_cpp"}}})
    _, skipped = build_tables(scores, plain, results, only=["repeats"])
    assert skipped == ["repeats: no model with repeats: k > 1 in the config"]


def test_tables_average_a_repeated_model_over_its_runs(tmp_path):
    results = tmp_path / "results"
    scores = write_results(results)
    config = study(leaderboard=[{"model": "m"}, {"model": "solo"}])
    build_tables(scores, config, results, only=["table2", "table9"])
    table2 = pd.read_csv(results / "table2.csv").set_index("model")
    assert table2.loc["m", "tier1"] == 73.33 and table2.loc["m", "seeds"] == 1   # the mean of its three runs
    # Table 9 with no bootstrap_models: the configured models, each repeat standing inside its model
    assert sorted(set(pd.read_csv(results / "table9.csv")["model"])) == ["m", "n", "solo"]


def test_a_bootstrap_over_three_runs_is_at_least_as_wide_as_over_one(tmp_path):
    rng = np.random.default_rng(7)
    runs = rng.choice([0.0, 50.0, 100.0], size=(60, 3))     # cases x runs that disagree
    one = bootstrap(runs.mean(axis=1))                     # the per-case mean, cases resampled only
    three = bootstrap(runs)
    assert three.estimate == pytest.approx(one.estimate)
    assert three.hi - three.lo >= one.hi - one.lo
    assert (three.hi - three.lo) > (one.hi - one.lo)       # these runs disagree: strictly wider
    # k identical runs, or one run as a column: exactly the one-run interval
    same = np.repeat(runs[:, :1], 3, axis=1)
    assert bootstrap(same) == bootstrap(runs[:, 0]) == bootstrap(runs[:, :1])
    groups = [runs[:30], runs[30:]]
    assert bootstrap_stratified([g[:, :1] for g in groups]) == bootstrap_stratified([g[:, 0] for g in groups])
    wide = bootstrap_stratified(groups)
    narrow = bootstrap_stratified([g.mean(axis=1) for g in groups])
    assert wide.hi - wide.lo >= narrow.hi - narrow.lo
    a = {f"c{i}": list(row) for i, row in enumerate(runs)}
    b = {f"c{i}": 50.0 for i in range(60)}
    paired, _ = paired_bootstrap(a, b)
    single, _ = paired_bootstrap({c: float(np.mean(v)) for c, v in a.items()}, b)
    assert paired.estimate == pytest.approx(single.estimate) and paired.hi - paired.lo >= single.hi - single.lo


def test_table9_resamples_a_repeated_models_runs(tmp_path):
    results = tmp_path / "results"
    scores = write_results(results)
    cases = load_case_scores(read_scores(scores))
    frame = built("table9", study(stats={"bootstrap_models": ["m"], "n_resamples": 2000}), cases)
    frame = frame[frame["partition"] == "full"]
    pooled = frame[frame["statistic"] == "pooled"].iloc[0]
    # the per-case means of m's runs over the five cases, cases resampled alone
    means = [80.0, 200 / 3, 100.0, 140 / 3, 160 / 3]
    alone = bootstrap(means, n_resamples=2000)
    assert pooled["tier1"] == round(float(np.mean(means)), 2) and pooled["n"] == 5
    assert pooled["tier1_hi"] - pooled["tier1_lo"] >= round(alone.hi, 2) - round(alone.lo, 2)


def check_config(tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "metrobench.study", str(path)], capture_output=True, text=True,
                          cwd=REPO)
    return done.returncode, done.stderr


def test_a_bad_repeats_is_one_error_line_naming_the_file_and_field(tmp_path):
    code, err = check_config(tmp_path, "models:\n  m: {provider: llama_cpp, repeats: 0}\n")
    assert code == 2 and err.splitlines() == [
        f"metrobench: error: {tmp_path / 'study.yaml'}: field models.m.repeats: Input should be greater than or "
        "equal to 1"]
    code, err = check_config(tmp_path, "models:\n  m: {repeats: 2}\n  m-rep2: {}\n")
    assert code == 2 and err.splitlines() == [
        f"metrobench: error: {tmp_path / 'study.yaml'}: field models.m.repeats: repeat m-rep2 of m has the name "
        "of another model: rename one of them"]
    code, err = check_config(tmp_path, "student_serving: {repeats: 2}\n")
    assert code == 2 and "field student_serving.repeats: students repeat by seed" in err and len(err.splitlines()) == 1
    assert check_config(tmp_path, "models:\n  m: {provider: llama_cpp, repeats: 3}\n")[0] == 0


def test_the_demo_plans_three_runs_and_the_repeats_table(tmp_path):
    cwd = workflow_copy(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    plan = subprocess.run([sys.executable, "-m", "snakemake", "results/repeats.csv", "-n", "-p", "--configfile",
                           "config/demo.yaml"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    runs = [line for line in plan.stdout.splitlines() if "metrobench run " in line]
    names = ("smollm2-135m", "smollm2-135m-rep2", "smollm2-135m-rep3")
    for name in names:      # each run job names its run; its RunJob resolves the repeat (issue 52)
        assert sum(f"--model {name} " in line and "--view holdout" in line for line in runs) == 6, name
    from metrobench.run_job import run_job
    from metrobench.study import load_study

    jobs = [run_job(load_study([str(cwd / "config/demo.yaml")]), name, "doha", "holdout") for name in names]
    assert [job.config.name for job in jobs] == list(names)
    assert [job.work for job in jobs] == [f"results/work/{name}/doha.jsonl" for name in names]
    assert len({job.fingerprint() for job in jobs}) == 3       # each its own sampling seed
    assert any("metrobench tables" in line and "--only repeats" in line for line in plan.stdout.splitlines())


DECLINED = chat_payload('{"outcome": "request_declined"}')


def run_repeat(root: Path, tmp_path: Path, url: str, repeat: int, *extra: str) -> int:
    config = tmp_path / "study.yaml"
    config.write_text("models:\n  fake: {retries: 1, backoff_s: 0.01, concurrency: 4, repeats: 3}\n")
    work = layout.work_path(layout.repeat_name("fake", repeat), "doha", str(tmp_path))
    out = layout.run_path(layout.repeat_name("fake", repeat), "doha", "holdout", str(tmp_path))
    return main(["run", "--data", str(root), "--system", "doha", "--config", str(config), "--model", "fake",
                 "--repeat", str(repeat), "--base-url", f"{url}/v1", "--partition", "holdout", "--work", work,
                 "--out", out, *extra])


def test_resuming_a_half_done_repeat_runs_only_its_missing_cases(root, tmp_path, capsys):
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert run_repeat(root, tmp_path, api.url, 2, "--limit", "3") == 0   # killed after three cases, say
        first = [r["body"] for r in api.requests]
        assert run_repeat(root, tmp_path, api.url, 2) == 0
        second = [r["body"] for r in api.requests[len(first):]]
        assert run_repeat(root, tmp_path, api.url, 1) == 0
        plain = [r["body"] for r in api.requests[len(first) + len(second):]]
    out = capsys.readouterr().out
    work = read_run(Path(layout.work_path("fake-rep2", "doha", str(tmp_path))))
    n = len(work.records)
    assert "ran 3 cases" in out and f"ran {n - 3} cases (0 failed), 3 already done" in out
    # the two halves sent what one whole run sends (a request per round), no case twice
    assert len(first) + len(second) == len(plain) == sum(r.api_rounds for r in work.records)
    assert {body["seed"] for body in first + second} == {1}   # repeat 2: the model's seed (unset: 0) + 1
    assert all("seed" not in body for body in plain)           # repeat 1 is the model as configured
    assert {r.model for r in work.records} == {"fake-rep2"}
    assert {r.meta["settings"]["repeat"] for r in work.records} == {2}
    one = read_run(Path(layout.work_path("fake", "doha", str(tmp_path))))
    assert "repeat" not in one.records[0].meta["settings"]
    assert one.records[0].meta["config"] != work.records[0].meta["config"]


@pytest.mark.parametrize("provider, key", [("llama_cpp", "seed"), ("openai", "seed"), ("mistral", "random_seed")])
def test_run_i_of_a_seeded_model_sends_its_seed_plus_i_minus_1(provider, key, monkeypatch):
    # issue 41, class 6: run 1 sends the configured seed (+ 0), runs 2 and 3 the next ones; an
    # unseeded model sends none on run 1 (as the reference) and i - 1 on run i > 1
    from metrobench.agents.runner.client import ChatClient
    from metrobench.agents.runner.config import ModelConfig

    def sent(cfg: ModelConfig, repeat: int) -> object:
        body = ChatClient(cfg.for_repeat(repeat), base_url="http://127.0.0.1:9/v1").chat_kwargs([], [])
        return {**body, **body.get("extra_body", {})}.get(key)

    monkeypatch.setenv("METROBENCH_TEST_KEY", "k")
    seeded = ModelConfig(name="m", provider=provider, seed=7, repeats=3, api_key_env="METROBENCH_TEST_KEY")
    unseeded = seeded.model_copy(update={"seed": None})
    assert [sent(seeded, i) for i in (1, 2, 3)] == [7, 8, 9]
    assert [sent(unseeded, i) for i in (1, 2, 3)] == [None, 1, 2]
    assert seeded.for_repeat(1).settings()["seed"] == 7 and "repeat" not in seeded.for_repeat(1).settings()

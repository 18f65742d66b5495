"""The rule-based baseline: the paper's numbers, its tool-call census and its quirks."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pandas as pd
import pytest

from metrobench.cli import main
from metrobench.data import SYSTEMS
from metrobench.agents.rule_agent import run_cases
from metrobench.scoring.metrics import headline
from metrobench.data.partition import load_split
from metrobench.scoring.scorer import Scorer

PAPER_HOLDOUT = {"marta": 80.4, "doha": 85.6, "bart": 88.7, "taipei": 84.3, "cta": 81.1, "beijing": 87.5}


@pytest.fixture(scope="module")
def baseline(bench):
    records, totals = {}, {}
    for system in SYSTEMS:
        cases = bench.cases(system)
        records[system] = list(run_cases(bench.system(system), cases))
        scores = Scorer(bench.system(system)).score([c.raw for c in cases], records[system])
        totals[system] = [s.totals(system) for s in scores]
    return records, totals


def test_reproduces_the_paper_baseline(baseline, bench):
    _, totals = baseline
    split = load_split(bench, None)
    held = headline({s: [c for c in v if split[c.case_id] == "holdout"] for s, v in totals.items()})
    assert held.tier1_by_system == PAPER_HOLDOUT
    assert f"{held.tier1:.2f}" == "84.60" and held.n == 238
    full = headline(totals)
    assert f"{full.tier1:.2f}" == "84.55" and full.n == 955


def test_tool_call_census_matches_the_reference_run(baseline):
    records, _ = baseline
    census = Counter((c["name"], c["error"] is None) for rs in records.values() for r in rs
                     for c in r.tool_calls_made)
    assert census == {("station_info", True): 885, ("route_planner", True): 739,
                      ("fare_calculator", True): 733, ("fare_calculator", False): 6,
                      ("submit_assistant_state", True): 222, ("submit_assistant_state", False): 733,
                      ("knowledge_base", True): 216, ("disruption_feed", True): 149}
    assert all(r.error is None for rs in records.values() for r in rs)


def test_station_names_as_stops_are_rejected_and_still_scored(baseline):
    records, _ = baseline
    for rs in records.values():
        for r in rs:
            submit = r.tool_calls_made[-1]
            assert submit["name"] == "submit_assistant_state"
            if submit["arguments"].get("route"):
                assert submit["error"].startswith('{"detail":"Unknown station IDs')
                assert len(submit["error"]) <= 200
                assert r.response["ui_updates"]["route"] == submit["arguments"]["route"]


def test_quirks_of_the_reference_baseline(baseline, bench):
    records, _ = baseline
    by_id = {r.case_id: r for rs in records.values() for r in rs}
    # Shared-track realisation of the paper: MARTA trunk on red, BART Embarcadero-SFO on yellow.
    for case_id in ("MARTA-C-016", "MARTA-C-017", "MARTA-C-018", "BART-K-002"):
        assert by_id[case_id].response["outcome"] == "advisory_only", case_id
        assert by_id[case_id].response["ui_updates"]["fare_quote"] is None
    for case_id in ("BART-C-018", "BART-C-020"):
        assert by_id[case_id].response["outcome"] == "route_and_fare_ready", case_id
    # Accessibility mode flags every stop.
    case = next(c for c in bench.cases("doha") if c.raw["system_context"].get("accessibility_mode")
                and c.category == "D")
    record = by_id[case.id]
    stops = [c for c in record.tool_calls_made if c["name"] == "station_info"]
    banners = record.response["ui_updates"]["advisory_banners"]
    assert len(banners) == len(stops) > 0
    assert record.response["kiosk_action"]["reason_code"] == "accessibility_issue"
    # The feed is asked without the current time: expired disruptions are still served.
    for rs in records.values():
        for r in rs:
            feeds = [c for c in r.tool_calls_made if c["name"] == "disruption_feed"]
            for c in feeds:
                assert c["arguments"] == {"severity_filter": "all"}
    expired = [r.case_id for rs in records.values() for r in rs for c in r.tool_calls_made
               if c["name"] == "disruption_feed"
               for d in c["result"]["disruptions"] if d.get("valid_until")
               and d["valid_until"] < (bench.case(r.case_id).raw["system_context"].get("temporal_context") or {}).get(
                   "current_time", bench.case(r.case_id).raw["system_context"].get("current_time") or "")]
    assert expired


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_rule_agent_score_summary_end_to_end(tmp_path, root, capsys):
    runs, scores = tmp_path / "runs", tmp_path / "scores"
    for system in SYSTEMS:
        assert main(["rule-agent", "--data", str(root), "--system", system,
                     "--out", str(runs / f"{system}.jsonl")]) == 0
    first = {s: _sha(runs / f"{s}.jsonl") for s in SYSTEMS}
    assert main(["rule-agent", "--data", str(root), "--system", "marta",
                 "--out", str(runs / "marta.jsonl")]) == 0
    assert _sha(runs / "marta.jsonl") == first["marta"]  # byte-identical reruns

    args = ["score", "--data", str(root), "--out", str(scores)]
    for system in SYSTEMS:
        args += ["--run", str(runs / f"{system}.jsonl")]
    assert main(args) == 0
    part = scores / "model=rule-agent" / "system=marta" / "part.parquet"
    before = _sha(part)
    assert main(["score", "--data", str(root), "--out", str(scores), "--run", str(runs / "marta.jsonl")]) == 0
    assert _sha(part) == before

    frame = pd.read_parquet(scores)
    assert len(frame.groupby(["system", "case_id"], observed=True)) == 955
    assert set(frame["model"].astype(str)) == {"rule-agent"}
    assert frame.loc[frame["partition"] == "holdout", "case_id"].nunique() == 238

    capsys.readouterr()
    assert main(["summary", "--scores", str(scores), "--partition", "holdout"]) == 0
    out = capsys.readouterr().out
    assert "headline    238    84.60" in out
    assert "judge off" in out
    assert main(["summary", "--scores", str(scores), "--partition", "full"]) == 0
    assert "headline    955    84.55" in capsys.readouterr().out


def test_holdout_run_scored_against_all_cases_reports_both_numbers(tmp_path, root, capsys):
    run = tmp_path / "doha.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--partition", "holdout",
                 "--out", str(run)]) == 0
    assert len(run.read_text().splitlines()) == 1 + 39   # the header, then the held-out cases
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"),
                 "--partition", "all"]) == 0
    captured = capsys.readouterr()
    assert "117 missing (scored as failures)" in captured.out
    assert "the run covers partition holdout; scoring it as --partition all" in captured.err
    assert main(["summary", "--scores", str(tmp_path / "s"), "--partition", "full"]) == 0
    out = capsys.readouterr().out
    assert "117 cases are missing from the run" in out
    # "all", the runs' word for the whole set, is the same summary, byte for byte
    assert main(["summary", "--scores", str(tmp_path / "s"), "--partition", "all"]) == 0
    assert capsys.readouterr().out == out
    assert "dropping them as the reference did gives Tier 1 85.60" in out


def test_several_systems_in_one_process_write_one_transcript_each(tmp_path, root, capsys):
    one = tmp_path / "one"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--partition", "holdout",
                 "--out", str(one / "doha.jsonl"), "--no-verify"]) == 0
    both = tmp_path / "both"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--system", "cta", "--partition",
                 "holdout", "--out", str(both / "{system}.jsonl"), "--no-verify"]) == 0
    assert sorted(p.name for p in both.glob("*.jsonl")) == ["cta.jsonl", "doha.jsonl"]  # beside their locks
    assert (both / "doha.jsonl").read_bytes() == (one / "doha.jsonl").read_bytes()
    header, *cta = (json.loads(line) for line in (both / "cta.jsonl").read_text().splitlines())
    assert header["header"]["system"] == "cta" and header["header"]["model"] == "rule-agent"
    assert {r["system"] for r in cta} == {"cta"} and {r["meta"]["selection"]["system"] for r in cta} == {"cta"}
    capsys.readouterr()
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--system", "cta",
                 "--out", str(tmp_path / "x.jsonl"), "--no-verify"]) == 2
    assert "with several --system, the path must hold {system}" in capsys.readouterr().err


@pytest.fixture(scope="module")
def teacher(bench):
    records, totals = {}, {}
    for system in SYSTEMS:
        cases = bench.cases(system)
        records[system] = list(run_cases(bench.system(system), cases, mode="teacher"))
        scores = Scorer(bench.system(system)).score([c.raw for c in cases], records[system])
        totals[system] = [s.totals(system) for s in scores]
    return records, totals


def test_teacher_mode_submits_what_the_kiosk_accepts(teacher, baseline):
    records, _ = teacher
    base = {r.case_id: r for rs in baseline[0].values() for r in rs}
    for rs in records.values():
        for r in rs:
            submit = r.tool_calls_made[-1]
            assert submit["name"] == "submit_assistant_state" and submit["error"] is None, r.case_id
            assert submit["result"]["accepted"] is True
            assert r.meta["ending"] == base[r.case_id].meta["ending"] == "answered"
            planned = [c for c in r.tool_calls_made if c["name"] == "route_planner" and c["error"] is None]
            route = submit["arguments"].get("route")
            if route:  # route_planner's station ids where the baseline has names; all else as it decided
                stops = planned[-1]["result"]["stops"]
                assert route["stops"] == [s["station_id"] for s in stops]
                assert base[r.case_id].response["ui_updates"]["route"]["stops"] == [s["station_name"] for s in stops]
            assert [c["name"] for c in r.tool_calls_made] == [c["name"] for c in base[r.case_id].tool_calls_made]


def test_teacher_mode_scores_as_the_baseline(teacher, bench):
    _, totals = teacher
    split = load_split(bench, None)
    for partition, expected in (("holdout", "84.60"), ("train", "84.52")):
        part = headline({s: [c for c in v if split[c.case_id] == partition] for s, v in totals.items()})
        assert f"{part.tier1:.2f}" == expected, partition


def test_cli_teacher_mode_is_fingerprinted(tmp_path, root, capsys):
    for mode in ("baseline", "teacher"):
        assert main(["rule-agent", "--data", str(root), "--system", "doha", "--partition", "holdout",
                     "--mode", mode, "--out", str(tmp_path / mode / "doha.jsonl"), "--no-verify"]) == 0
    out = capsys.readouterr().out       # run's counts line, each run (the alias executes run's job)
    assert out.count("doha.jsonl: ran 39 cases (0 failed), 0 already done") == 2
    lines = {m: [json.loads(x) for x in (tmp_path / m / "doha.jsonl").read_text().splitlines()]
             for m in ("baseline", "teacher")}
    headers = {m: lines[m].pop(0)["header"] for m in lines}   # the first line states the run once
    configs = {m: {r["meta"]["config"] for r in lines[m]} | {headers[m]["config"]} for m in lines}
    assert headers["teacher"]["settings"]["mode"] == "teacher"
    assert len(configs["teacher"]) == len(configs["baseline"]) == 1 and configs["teacher"] != configs["baseline"]
    assert {r["meta"]["settings"]["mode"] for r in lines["teacher"]} == {"teacher"}
    assert {r["meta"]["settings"]["provider"] for r in lines["baseline"]} == {"scripted"}
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--mode", "student",
                 "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "invalid choice: 'student'" in capsys.readouterr().err


def test_bench_runs_the_configs_rule_agent_as_any_model_its_teacher_mode_in_a_work_transcript_of_its_own(
        tmp_path, root, capsys):
    # issue 42: the rule agent is the study entry `rule-agent: {provider: scripted}`, run as any model by
    # the workflow's command (issue 52: `run --view`, the study's run job); the train view runs its
    # teacher mode, into a work transcript of its own
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"results: {tmp_path}\ndata:\n  path: {root}\nbench:\n  sample: null\n")
    work = tmp_path / "work" / "rule-agent" / "doha.jsonl"
    assert main(["partition", "--data", str(root), "--out", str(tmp_path / "partition.json")]) == 0

    def bench(partition: str) -> list[dict]:
        out = tmp_path / "runs" / partition / "rule-agent" / "doha.jsonl"
        assert main(["run", "--config", "config/demo.yaml", "--config", str(overlay), "--model", "rule-agent",
                     "--system", "doha", "--view", partition]) == 0
        header, *records = (json.loads(line) for line in out.read_text().splitlines())
        views[partition] = header["header"]
        return records

    views: dict[str, dict] = {}
    held = bench("holdout")
    train = bench("train")
    assert len(held) == 39 and len(train) == 117
    assert {r["meta"]["settings"]["mode"] for r in held} == {"baseline"}
    assert {r["meta"]["settings"]["mode"] for r in train} == {"teacher"}
    assert all(r["tool_calls_made"][-1]["result"]["accepted"] for r in train)
    assert all(r["messages"][-1]["role"] == "tool" for r in held + train)
    # no model was asked: no rounds, tokens or time (the protocol and deployment tables read them)
    assert {(r["api_rounds"], r["output_tokens"], r["e2e_ms"], r["ttft_ms"]) for r in held + train} == {(0, 0, 0.0, 0.0)}
    capsys.readouterr()
    again = bench("holdout")   # the teacher run set nothing aside: the baseline's cases are all done
    assert "ran 0 cases (0 failed), 39 already done" in capsys.readouterr().out
    assert again == held
    assert sorted(p.name for p in work.parent.glob("*.jsonl")) == ["doha.jsonl", "doha.teacher.jsonl"]
    # the alias writes the same records as bench's view (its selection stamped as the view's)
    alias = tmp_path / "alias.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--partition", "holdout",
                 "--out", str(alias)]) == 0
    header, *records = (json.loads(line) for line in alias.read_text().splitlines())
    assert records == held
    # and the same header, but for the view's selection (a transcript runs append to states none)
    assert header["header"]["selection"] is None
    assert views["holdout"] == {**header["header"], "selection": held[0]["meta"]["selection"]}


def test_the_scripted_provider_settings():
    from metrobench.agents.runner.config import ModelConfig, parse_model_config
    from metrobench.errors import MetrobenchError
    from metrobench.study import StudyConfig

    entry = parse_model_config({"name": "rule-agent", "provider": "scripted"})
    assert entry.max_rounds == 100 and entry.parallel == 1 and entry.settings()["mode"] == "baseline"
    teacher = entry.as_teacher()
    assert teacher.mode == "teacher" and teacher.fingerprint() != entry.fingerprint()
    fixed = parse_model_config({"name": "rule-agent", "provider": "scripted", "mode": "baseline"})
    assert fixed.as_teacher() is fixed and fixed.fingerprint() == entry.fingerprint()
    llm = ModelConfig(name="m", provider="openai")
    assert llm.as_teacher() is llm and "mode" not in llm.settings()   # every other fingerprint as it was
    with pytest.raises(MetrobenchError, match="field mode: .*provider scripted"):
        parse_model_config({"name": "m", "provider": "openai", "mode": "teacher"})
    # a config without the entry still has the rule agent its defaults name
    assert StudyConfig().model_entry("rule-agent") == {"provider": "scripted"}
    assert StudyConfig().unknown_model("rule-agent") is None and StudyConfig().model_entry("x") is None

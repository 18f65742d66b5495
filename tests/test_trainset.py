"""The training set keeps finished traces only: every turn's last submission accepted by the kiosk.

Real rule-agent runs in both modes (the baseline's route submissions are refused by the
kiosk, the teacher's accepted), scored by the real scorer, filtered by ``metrobench trainset``.
"""

from __future__ import annotations

import json
import shutil

import pytest

from metrobench.cli import main
from metrobench.data import SYSTEMS
from metrobench.data.partition import load_split
from metrobench.errors import MetrobenchError
from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.training.trainset import select_traces, tier1_by_model, turn_endings, unfinished

SUBMIT = "submit_assistant_state"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, root):
    """Train-partition runs of the rule agent in both modes, scored: DIR/<mode>/{runs,scores}."""
    base = tmp_path_factory.mktemp("modes")
    for mode in ("baseline", "teacher"):
        out = base / mode / "runs" / "rule-agent" / "{system}.jsonl"
        args = ["rule-agent", "--data", str(root), "--partition", "train", "--mode", mode, "--out", str(out),
                "--no-verify"]
        for system in SYSTEMS:
            args += ["--system", system]
        assert main(args) == 0
        score = ["score", "--data", str(root), "--out", str(base / mode / "scores"), "--judge", "none",
                 "--partition", "train"]
        for system in SYSTEMS:
            score += ["--run", str(base / mode / "runs" / "rule-agent" / f"{system}.jsonl")]
        assert main(score) == 0
    return base


def _records(path):
    """A transcript's records as written (its first line, the header, is none)."""
    header, *records = (json.loads(line) for line in path.read_text().splitlines())
    assert set(header) == {"header"}
    return records


def _last_submit_refused(record) -> bool:
    return [c for c in record["tool_calls_made"] if c["name"] == SUBMIT][-1]["error"] is not None


def test_a_trace_whose_final_submission_was_refused_never_enters(runs, bench):
    split = load_split(bench)
    path = runs / "baseline" / "runs"
    records = _records(path / "rule-agent" / "doha.jsonl")
    refused = {r["case_id"] for r in records if _last_submit_refused(r)}
    assert refused and len(refused) < len(records)      # both kinds present in the real run
    everything = {"rule-agent": {r["case_id"]: 100.0 for r in records}}  # every trace above the threshold
    selection = select_traces(bench, path, everything, ["rule-agent"], split, systems=("doha",))
    kept = {e.case_id for e in selection.examples}
    assert kept == {r["case_id"] for r in records} - refused
    assert selection.dropped("refused") == len(refused) and selection.dropped("below_threshold") == 0
    for example in selection.examples:                  # each ends on the kiosk's acceptance
        last = example.messages[-1]
        assert last["role"] == "tool" and json.loads(last["content"])["accepted"] is True


def test_teacher_mode_traces_all_end_accepted(runs, bench):
    split = load_split(bench)
    records = _records(runs / "teacher" / "runs" / "rule-agent" / "doha.jsonl")
    assert not any(_last_submit_refused(r) for r in records)
    everything = {"rule-agent": {r["case_id"]: 100.0 for r in records}}
    selection = select_traces(bench, runs / "teacher" / "runs", everything, ["rule-agent"], split,
                              systems=("doha",))
    assert len(selection.examples) == len(records) and selection.dropped("refused") == 0


def test_trainset_prints_the_drops_per_teacher_category_and_reason(runs, root, capsys, tmp_path):
    lines = {}
    for mode in ("baseline", "teacher"):
        capsys.readouterr()
        assert main(["trainset", "--data", str(root), "--scores", str(runs / mode / "scores"),
                     "--runs", str(runs / mode / "runs"), "--teachers", "rule-agent",
                     "--out", str(tmp_path / mode / "dataset.jsonl")]) == 0
        lines[mode] = capsys.readouterr().out.splitlines()
    baseline, teacher = lines["baseline"], lines["teacher"]
    assert baseline[0].startswith("wrote ") and "53 examples of 717 train cases" in baseline[0]
    assert "  rule-agent A: 91 traces, 0 kept; dropped: refused 91" in baseline
    assert "  rule-agent C: 92 traces, 0 kept; dropped: below_threshold 71, refused 21" in baseline
    assert "  rule-agent all: 717 traces, 53 kept; dropped: below_threshold 395, refused 269" in baseline
    assert "  (refused: a turn whose last submission the kiosk refused)" in baseline
    # the teacher mode's traces that pass the threshold all end accepted: nothing refused
    assert "322 examples of 717 train cases" in teacher[0]
    assert "  rule-agent A: 91 traces, 91 kept" in teacher
    assert "  rule-agent all: 717 traces, 322 kept; dropped: below_threshold 395" in teacher
    assert not any("refused" in line for line in teacher)


def test_a_second_teacher_tied_on_every_case_is_outranked(runs, bench, tmp_path):
    split = load_split(bench)
    for name in ("a", "b"):
        shutil.copytree(runs / "teacher" / "runs" / "rule-agent", tmp_path / name)
    tier1 = tier1_by_model(runs / "teacher" / "scores", ["rule-agent"])
    both = {"a": tier1["rule-agent"], "b": tier1["rule-agent"]}
    selection = select_traces(bench, tmp_path, both, ["a", "b"], split)
    assert {e.teacher for e in selection.examples} == {"a"} and len(selection.examples) == 322
    assert selection.dropped("outranked") == 322
    assert "  b all: 717 traces, 0 kept; dropped: below_threshold 395, outranked 322" in selection.report()


def _answer(bench, system: str, arguments: dict) -> str:
    """The tool message the runner writes for a submission: the kiosk's body, or its error."""
    answer = call_tool(ToolSession(bench.system(system)), SUBMIT, arguments)
    return json.dumps(answer.body if answer.ok else {"error": answer.text})


def _turn(call_id: str, name: str, content: str) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": content}]


def test_every_turn_of_a_multi_turn_trace_must_end_accepted(runs, bench):
    teacher = _records(runs / "teacher" / "runs" / "rule-agent" / "doha.jsonl")
    state = next(c["arguments"] for r in teacher for c in r["tool_calls_made"]
                 if c["name"] == SUBMIT and c["arguments"].get("route"))
    accepted = _answer(bench, "doha", state)
    refused = _answer(bench, "doha", {**state, "route": {**state["route"], "stops": ["Nowhere"]}})
    assert json.loads(accepted)["accepted"] is True and "Unknown station IDs" in refused
    planner = json.dumps({"route_id": "r"})
    user = [{"role": "system", "content": "s"}, {"role": "user", "content": "turn 1"}]
    second = [{"role": "user", "content": "turn 2"}]
    good = user + _turn("1", SUBMIT, accepted) + second + _turn("2", SUBMIT, refused) + _turn("3", SUBMIT, accepted)
    assert turn_endings(good) == [True, True] and unfinished(good) is None   # corrected within the turn
    late = user + _turn("1", SUBMIT, accepted) + second + _turn("2", SUBMIT, refused)
    assert turn_endings(late) == [True, False] and unfinished(late) == "refused"
    skipped = user + _turn("1", "route_planner", planner) + second + _turn("2", SUBMIT, accepted)
    assert turn_endings(skipped) == [None, True] and unfinished(skipped) == "no_submission"
    assert unfinished(user + _turn("1", "route_planner", planner)) == "no_submission"


@pytest.mark.parametrize("call, field", [
    ({"id": "c1", "type": "function", "function": {"arguments": "{}"}}, "messages[2].tool_calls[0].function.name"),
    ({"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}},
     "messages[2].tool_calls[0].function.name"),
    ({"id": "c1", "type": "function"}, "messages[2].tool_calls[0].function.name"),
])
def test_a_foreign_tool_call_without_a_function_name_is_one_error_line(runs, root, bench, tmp_path, capsys,
                                                                       call, field):
    # issue 41, class 7: was a KeyError traceback in clean_messages
    split = load_split(bench)
    teacher = _records(runs / "teacher" / "runs" / "rule-agent" / "doha.jsonl")
    record = next(r for r in teacher if split.get(r["case_id"]) == "train")
    record["model"] = "foreign"
    record["messages"] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                          {"role": "assistant", "content": "", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    path = tmp_path / "runs" / "foreign" / "doha.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(MetrobenchError) as caught:
        select_traces(bench, tmp_path / "runs", {"foreign": {record["case_id"]: 100.0}}, ["foreign"], split,
                      systems=("doha",))
    message = str(caught.value)
    assert message.startswith(f"{path}: case {record['case_id']}: field {field}: ") and "\n" not in message


def test_the_rule_agents_records_carry_their_conversation_and_an_old_one_without_is_dropped(runs, bench, tmp_path):
    # issue 42: the rule agent runs in the runner's loop, so its records hold `messages` as any model's;
    # a transcript written before (no messages) is read, its traces dropped as no_messages, never rebuilt
    split = load_split(bench)
    teacher = _records(runs / "teacher" / "runs" / "rule-agent" / "doha.jsonl")
    assert all(r["messages"] and r["messages"][0]["role"] == "system" for r in teacher)
    record = next(r for r in teacher if split.get(r["case_id"]) == "train")
    assert [m["role"] for m in record["messages"]][:3] == ["system", "user", "assistant"]
    calls = [c for m in record["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["function"]["name"] for c in calls] == [c["name"] for c in record["tool_calls_made"]]
    assert [c["id"] for c in calls] == [f"call_{i}" for i in range(len(calls))]
    old = {k: v for k, v in record.items() if k != "messages"}
    path = tmp_path / "runs" / "rule-agent" / "doha.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old) + "\n")
    selection = select_traces(bench, tmp_path / "runs", {"rule-agent": {record["case_id"]: 100.0}},
                              ["rule-agent"], split, systems=("doha",))
    assert selection.examples == [] and selection.dropped("no_messages") == 1
    assert any("no_messages: a record without its conversation" in line for line in selection.report())


def test_a_case_recorded_twice_is_read_from_its_last_record_as_it_was_scored(runs, root, bench, tmp_path, capsys):
    # issue 41, class 2: trainset kept the first record's trace with the last one's Tier 1
    split = load_split(bench)
    teacher = _records(runs / "teacher" / "runs" / "rule-agent" / "doha.jsonl")
    tier1 = tier1_by_model(runs / "teacher" / "scores", ["rule-agent"])["rule-agent"]
    good = next(r for r in teacher if split.get(r["case_id"]) == "train" and tier1[r["case_id"]] >= 90)
    redone = json.loads(json.dumps(good))
    redone["tool_calls_made"] = [dict(good["tool_calls_made"][0], result={"redone": True}),
                                 *good["tool_calls_made"]]   # another finished trace of the case
    first = redone["messages"][2]["tool_calls"][0]
    redone["messages"][2:2] = [{"role": "assistant", "content": "", "tool_calls": [dict(first, id="redo")]},
                               {"role": "tool", "tool_call_id": "redo", "content": json.dumps({"redone": True})}]
    runs_dir = tmp_path / "runs"
    path = runs_dir / "rule-agent" / "doha.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(good) + "\n" + json.dumps(redone) + "\n")
    # the scorer scores the last record; the training set reads that same record
    assert main(["score", "--data", str(root), "--run", str(path), "--out", str(tmp_path / "scores"),
                 "--judge", "none", "--partition", "train"]) == 0
    assert f"case {good['case_id']} appears more than once: the last record is scored" in capsys.readouterr().err
    scores = tier1_by_model(tmp_path / "scores", ["rule-agent"])
    selection = select_traces(bench, runs_dir, scores, ["rule-agent"], split, systems=("doha",))
    [example] = selection.examples
    assert example.tier1 == scores["rule-agent"][good["case_id"]]
    assert json.loads(example.messages[3]["content"]) == {"redone": True}   # the last record's first answer
    assert "  rule-agent all: 1 traces, 1 kept" in selection.report()
    assert capsys.readouterr().err.splitlines() == [
        f"metrobench: warning: {path}: case {good['case_id']} appears more than once: its last record is used, "
        "as it was scored"]
    # the last record failed: the case is dropped, never trained on the first record's trace
    failed = dict(good, error="Exhausted 20 tool call rounds")
    path.write_text(json.dumps(good) + "\n" + json.dumps(failed) + "\n")
    selection = select_traces(bench, runs_dir, {"rule-agent": {good["case_id"]: 100.0}}, ["rule-agent"], split,
                              systems=("doha",))
    assert selection.examples == [] and selection.dropped("run_error") == 1

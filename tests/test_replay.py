"""``metrobench tool``: replaying calls with per-case sessions."""

from __future__ import annotations

import json

from metrobench.cli import main


def _run(capsys, root, tmp_path, system, lines):
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(json.dumps(line) if isinstance(line, dict) else line for line in lines) + "\n")
    code = main(["tool", "--data", str(root), "--system", system, str(calls)])
    captured = capsys.readouterr()
    return code, [json.loads(x) for x in captured.out.splitlines()], captured.err


def test_replay_sessions_and_set_disruptions(capsys, root, tmp_path):
    code, out, _ = _run(capsys, root, tmp_path, "marta", [
        {"tool": "disruption_feed", "args": {}, "case_id": "MARTA-C-016"},
        {"tool": "disruption_feed", "args": {}, "case_id": "MARTA-C-018"},
        {"tool": "disruption_feed", "args": {}},
        {"tool": "set_disruptions", "args": {"disruptions": [{"id": "x", "type": "t", "severity": "info", "message": "m"}]}},
        {"tool": "disruption_feed", "args": {}},
        {"tool": "route_planner", "args": {"origin": "Airport", "destination": "Five Points"}, "case_id": "MARTA-C-016"},
        {"tool": "fare_calculator", "args": {"route_id": "route_0270621855ef", "passengers": {"adults": 1}}, "case_id": "MARTA-C-016"},
        {"tool": "teleport", "args": {}},
    ])
    assert code == 0
    assert [len(o["body"]["disruptions"]) for o in out[:3]] == [1, 0, 0]  # C-018's disruption expired at case time
    assert out[3] == {"tool": "set_disruptions", "args": out[3]["args"], "status": 200, "body": {"ok": True}}
    assert [d["id"] for d in out[4]["body"]["disruptions"]] == ["x"]
    assert out[5]["body"]["line_sequence"] == ["red"] and out[6]["body"]["total"] == 2.5
    assert out[7] == {"tool": "teleport", "args": {}, "status": 404, "body": {"detail": "Not Found"}}


def test_replay_bad_lines_name_file_and_line(capsys, root, tmp_path):
    code, _, err = _run(capsys, root, tmp_path, "marta", [{"tool": "line_info", "args": {"line": "red"}}, "{oops"])
    assert code == 2 and "calls.jsonl: line 2: not valid JSON" in err
    code, _, err = _run(capsys, root, tmp_path, "marta", [{"args": {}}])
    assert code == 2 and "line 1: field tool" in err
    code, _, err = _run(capsys, root, tmp_path, "marta", [{"tool": "line_info", "args": {}, "case_id": "BART-A-001"}])
    assert code == 2 and "BART-A-001 belongs to bart" in err


def test_a_lone_surrogate_in_a_call_is_answered_not_a_traceback(capsys, root, tmp_path):
    # the line as JSON carries it: {"line": "\\ud800"}; UTF-8 output cannot hold it
    code, out, err = _run(capsys, root, tmp_path, "marta", ['{"tool": "line_info", "args": {"line": "\\ud800"}}'])
    assert code == 0 and err == "" and len(out) == 1
    text = json.dumps(out, ensure_ascii=False)
    assert "\ud800" not in text
    text.encode("utf-8")                                   # printable as UTF-8

"""The small shared pieces: one session store, one atomic writer, one JSONL reader, one retry rule."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from metrobench.atomic import atomic_dir, atomic_open, atomic_path, write_text
from metrobench.errors import MetrobenchError
from metrobench.jsonl import iter_lines, iter_objects
from metrobench.retry import MAX_DELAY_S, backoff_delay, retry_after
from metrobench.kiosk.sessions import SessionStore


# --- sessions: replay (case context) and the HTTP server (none) agree on every other case id

def test_session_store_rules_for_case_ids(bench):
    replay, server = SessionStore(bench, "marta", case_context=True), SessionStore(bench, "marta")
    known = "MARTA-C-016"   # a case with an active disruption and a current time
    assert replay.get(known).disruptions and replay.get(known).current_time
    assert not server.get(known).disruptions and server.get(known).current_time is None
    for store in (replay, server):
        for case_id in ("ZZZ-A-001", "MARTA-Q-999"):   # no such case: no context, the default system
            session = store.get(case_id)
            assert (session.system.name, session.case_id, session.disruptions, session.current_time) == \
                ("marta", case_id, [], None)
            assert store.get(case_id) is session          # one session per id
        assert store.get(None) is store.get("_default") and store.get(None).case_id is None
    with pytest.raises(MetrobenchError, match="BART-A-001 belongs to bart, not marta"):
        replay.get("BART-A-001")
    assert server.get("BART-A-001").system.name == "marta"   # the reference server knows no cases


def test_set_disruptions_on_another_system_opens_a_fresh_session(bench):
    store = SessionStore(bench, "marta")
    before = store.get("X-1")
    before.route_cache["route_x"] = {"stale": True}
    disruption = {"id": "d", "type": "t", "severity": "info", "message": "m"}
    store.set_disruptions("X-1", "marta", [disruption])
    assert store.get("X-1") is before and [d["id"] for d in before.disruptions] == ["d"]
    store.set_disruptions("X-1", "bart", [])
    after = store.get("X-1")
    assert after is not before and after.system.name == "bart" and after.route_cache == {}
    assert after.case_id == "X-1"


# --- atomic writes

def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "sub" / "out.json"
    write_text(target, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old\n" and sorted(p.name for p in target.parent.iterdir()) == ["out.json"]
    with pytest.raises(MetrobenchError):
        with atomic_path(target) as tmp:
            tmp.write_text("converter output")
            raise MetrobenchError("converter failed")
    assert target.read_text() == "old\n" and sorted(p.name for p in target.parent.iterdir()) == ["out.json"]
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"


def test_stale_temporaries_of_dead_writers_go_and_live_ones_stay(tmp_path):
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    (tmp_path / f".t.csv.{dead}.tmp").write_text("half")
    (tmp_path / f".t.csv.{os.getppid()}.tmp").write_text("busy")
    (tmp_path / f".site.{dead}.tmp").mkdir()
    write_text(tmp_path / "t.csv", "a\n")
    with atomic_dir(tmp_path / "site") as tmp:
        (tmp / "index.html").write_text("<p>new</p>")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t.csv", f".t.csv.{os.getppid()}.tmp", "site"])
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "site") as tmp:
            (tmp / "index.html").write_text("<p>half</p>")
            raise RuntimeError("killed")
    assert (tmp_path / "site" / "index.html").read_text() == "<p>new</p>"
    with atomic_dir(tmp_path / "site") as tmp:
        (tmp / "other.html").write_text("x")
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == ["other.html"]   # replaced, not merged


# --- JSONL

def test_jsonl_errors_name_file_and_line_and_an_unfinished_last_line_is_skipped_only_when_asked(tmp_path, capsys):
    text = '{"a": 1}\n\n[1, 2]\n{"a": '
    with pytest.raises(MetrobenchError, match=r"^f.jsonl: line 4: not valid JSON \("):
        list(iter_lines(text, "f.jsonl"))
    assert list(iter_lines(text, "f.jsonl", unfinished="skip")) == [(1, {"a": 1}), (3, [1, 2])]
    assert "f.jsonl: line 4: unfinished record skipped" in capsys.readouterr().err
    with pytest.raises(MetrobenchError, match=r"f.jsonl: line 1: not valid JSON"):
        list(iter_lines('{"a": \n{"b": 2}\n', "f.jsonl", unfinished="skip"))   # not the last line: an error
    with pytest.raises(MetrobenchError, match="line 1: JSON nested too deeply"):
        list(iter_lines("[" * 100_000 + "]" * 100_000 + "\n", "f.jsonl"))
    path = tmp_path / "o.jsonl"
    path.write_text('{"case_id": "A"}\n[1]\n')
    with pytest.raises(MetrobenchError, match=r"o.jsonl: line 2: field case_id: each line must be a JSON object "
                                              r"with a string case_id"):
        list(iter_objects(path, field="case_id"))
    path.write_bytes(b'{"case_id": "A"}\n{"case_id": "\xff"}\n')
    with pytest.raises(MetrobenchError, match=r"o.jsonl: line 2: "):
        list(iter_objects(path, field="case_id"))


# --- retries

class _Response:
    def __init__(self, headers):
        self.headers = headers


class _Error(Exception):
    def __init__(self, headers):
        self.response = _Response(headers)


def test_backoff_honours_retry_after_and_otherwise_doubles_with_jitter_capped_at_a_minute():
    assert retry_after(_Error({"retry-after": "7"})) == 7.0
    assert retry_after(_Error({"retry-after": "soon"})) is None and retry_after(ValueError()) is None
    assert backoff_delay(3, 1.0, 7.0) == 7.0 and backoff_delay(1, 1.0, 600.0) == MAX_DELAY_S
    for attempt, low in ((1, 1.0), (2, 2.0), (3, 4.0)):
        delays = [backoff_delay(attempt, 1.0) for _ in range(50)]
        assert all(low <= d <= low * 1.25 for d in delays) and len(set(delays)) > 1
    assert backoff_delay(20, 1.0) == MAX_DELAY_S

"""Fault drills: malformed endpoint replies, concurrent runs, mixed systems, bad arguments and files.

Every drill is met as a user would meet it, against real protocol fakes on
127.0.0.1: each asserts the run goes on (or refuses with one
``metrobench: error:`` line and status 2) instead of crashing or losing cases.
"""

from __future__ import annotations

import json

import pytest
from fake_messages_api import FakeMessagesAPI
from fake_openai_api import FakeOpenAI, chat_payload

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.runner.config import ModelConfig
from metrobench.runner.run import run_model
from metrobench.scoring.judge import AnthropicBackend, Judge, JudgeCache, OpenAIBackend
from metrobench.scoring.rubrics import JudgeTask
from metrobench.transcript import read_run

HTML = b"<html><body><h1>502 Bad Gateway</h1><p>upstream proxy page</p></body></html>"
IDS = ["MARTA-A-001", "MARTA-A-002", "MARTA-A-003"]


def cfg(url: str, **kw) -> ModelConfig:
    base = {"name": "fake", "provider": "llama_cpp", "base_url": f"{url}/v1", "retries": 2,
            "backoff_s": 0.01, "concurrency": 1}
    return ModelConfig(**{**base, **kw})


def fast_config(tmp_path, name: str = "fake-1") -> str:
    """A model config file that retries quickly (the command line has no retry flags)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nretries: 2\nbackoff_s: 0.01\nconcurrency: 1\n")
    return str(path)


def run(bench, config, ids, out, system="marta", **kw):
    cases = [bench.case(i) for i in ids]
    return run_model(config, bench.system(system), cases, out, progress_stream=open("/dev/null", "w"), **kw)


# 1. a malformed HTTP 200 is a retryable endpoint error, recorded on the case; the run goes on

MALFORMED = {
    "html": HTML,
    "no choices": {"id": "x", "object": "chat.completion", "created": 0, "model": "fake"},
    "empty choices": {"id": "x", "object": "chat.completion", "created": 0, "model": "fake", "choices": []},
    "choices null message": {"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                             "choices": [{"index": 0, "message": None, "finish_reason": "stop"}]},
    "json list": [1, 2, 3],
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_200_is_retried_then_recorded_and_the_run_goes_on(bench, tmp_path, kind):
    with FakeOpenAI(lambda r: MALFORMED[kind]) as api:
        summary = run(bench, cfg(api.url), IDS, tmp_path / "t.jsonl")
    assert (summary.ran, summary.failed) == (3, 3)
    assert len(api.requests) == 3 * 2  # every case retried once (retries=2), then given up
    records = read_run(tmp_path / "t.jsonl").records
    assert sorted(r.case_id for r in records) == IDS
    for record in records:
        assert record.error.startswith("malformed reply: ") and record.meta["retryable"] is True


def test_malformed_200_then_a_good_reply_recovers(bench, tmp_path):
    replies = iter([HTML, chat_payload('{"outcome": "request_declined"}')])
    with FakeOpenAI(lambda r: next(replies)) as api:
        summary = run(bench, cfg(api.url), IDS[:1], tmp_path / "t.jsonl")
    assert (summary.ran, summary.failed) == (1, 0) and len(api.requests) == 2


def test_cli_run_against_an_html_endpoint_exits_normally_with_one_record_per_case(root, tmp_path, capsys):
    out = tmp_path / "h.jsonl"
    with FakeOpenAI(lambda r: HTML) as api:
        code = main(["run", "--data", str(root), "--system", "marta", "--model-config", fast_config(tmp_path),
                     "--base-url", f"{api.url}/v1", "--cases", ",".join(IDS), "--out", str(out)])
    assert code == 0
    assert "ran 3 cases (3 failed)" in capsys.readouterr().out
    records = read_run(out).records
    assert len(records) == 3 and all(r.error for r in records)


@pytest.mark.parametrize("kind", ["html", "no content"])
def test_anthropic_judge_retries_a_malformed_200_then_gives_one_error(monkeypatch, kind):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")

    class Broken(FakeMessagesAPI):
        def answer(self, request):
            super().answer(request)
            return 200, HTML if kind == "html" else {"id": "m", "type": "message"}, {}

    with Broken(lambda p: "Score: 2 | ok") as api:
        judge = Judge(AnthropicBackend(base_url=api.url), JudgeCache(None), max_attempts=3, base_delay=0.01)
        with pytest.raises(MetrobenchError, match=r"malformed reply.*after 3 attempts"):
            judge._ask(_task())
        assert len(api.requests) == 3


@pytest.mark.parametrize("kind", ["html", "empty choices"])
def test_openai_judge_retries_a_malformed_200_then_gives_one_error(kind):
    with FakeOpenAI(lambda r: MALFORMED[kind]) as api:
        backend = OpenAIBackend("judge-m", base_url=f"{api.url}/v1")
        judge = Judge(backend, JudgeCache(None), max_attempts=3, base_delay=0.01)
        with pytest.raises(MetrobenchError, match=r"malformed reply.*after 3 attempts"):
            judge._ask(_task())
        assert len(api.requests) == 3


def _task() -> JudgeTask:
    return JudgeTask("scope_adherence", "MARTA-A-001", "Rate this.", "hi", float)


# 2. one writer per transcript: a second run refuses while the first holds the lock


def _locked(path) -> bool:
    import fcntl
    import os

    from metrobench.transcript import lock_path

    sidecar = lock_path(path)
    if not sidecar.exists():
        return False
    fd = os.open(sidecar, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_second_run_on_a_transcript_being_written_refuses_with_one_line(root, tmp_path, capsys):
    import subprocess
    import sys
    import threading
    import time

    out = tmp_path / "runs" / "marta.jsonl"
    gate = threading.Event()

    def slow(request):
        gate.wait(20)
        return chat_payload('{"outcome": "request_declined"}')

    with FakeOpenAI(slow) as api:
        args = ["run", "--data", str(root), "--system", "marta", "--model-config", fast_config(tmp_path),
                "--base-url", f"{api.url}/v1", "--cases", ",".join(IDS), "--out", str(out)]
        first = subprocess.Popen([sys.executable, "-m", "metrobench", *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not api.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert api.requests, "the first run never called the endpoint"
            assert _locked(out)
            assert main(args) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("metrobench: error: ")
            assert "another metrobench process is writing this transcript" in err
        finally:
            gate.set()
            stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 0, stderr
    assert "ran 3 cases (0 failed)" in stdout
    ids = [json.loads(line)["case_id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == IDS  # each case once
    assert not _locked(out)  # released on exit
    with FakeOpenAI(lambda r: chat_payload("x")) as api:  # and the next run may proceed
        assert main([*args[:-4], "--base-url", f"{api.url}/v1", "--cases", IDS[0], "--out", str(out)]) == 0


def test_the_lock_is_reentrant_within_a_process_and_released_on_error(tmp_path):
    from metrobench.transcript import transcript_lock

    out = tmp_path / "t.jsonl"
    with transcript_lock(out):
        with transcript_lock(out):
            assert _locked(out)
        assert _locked(out)
    assert not _locked(out)
    with pytest.raises(RuntimeError):
        with transcript_lock(out):
            raise RuntimeError("boom")
    assert not _locked(out)


# 3. resume refuses a transcript of another system


def test_resume_refuses_a_transcript_of_another_system(bench, tmp_path):
    out = tmp_path / "t.jsonl"
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        run(bench, cfg(api.url), IDS[:1], out)
        doha = [c.id for c in bench.cases("doha")][:1]
        with pytest.raises(MetrobenchError, match="is a marta case, not doha"):
            run(bench, cfg(api.url), doha, out, system="doha")
    assert [r.case_id for r in read_run(out).records] == IDS[:1]


# 4. scoring a run as another system refuses and writes nothing


def test_scoring_a_doha_run_as_marta_refuses_and_keeps_the_marta_scores(root, tmp_path, capsys):
    runs, scores = tmp_path / "runs", tmp_path / "scores"
    for system in ("marta", "doha"):
        assert main(["rule-agent", "--data", str(root), "--system", system, "--partition", "holdout",
                     "--out", str(runs / f"{system}.jsonl")]) == 0
    assert main(["score", "--data", str(root), "--run", str(runs / "marta.jsonl"), "--out", str(scores),
                 "--partition", "holdout"]) == 0
    before = {p: p.read_bytes() for p in scores.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["score", "--data", str(root), "--run", str(runs / "doha.jsonl"), "--out", str(scores),
                 "--system", "marta", "--partition", "holdout"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("metrobench: error: ") and "--system marta" in err
    assert {p: p.read_bytes() for p in scores.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "scores.judge-cache.jsonl").exists()

"""Runs fail loud on the infrastructure, never on the model (real HTTP on 127.0.0.1).

A case ends either as the reference's runner ended it (an answer, the round budget, an
HTTP status, a time-out: recorded and scored; tests/test_protocol.py has every such
situation) or on the endpoint's absence (connection refused or dropped, a refused key, an
unknown model): then the run exits with one ``metrobench: error:`` line naming the cases and
why, and a rerun redoes exactly those cases. A refused key, an unknown model or a server
never reached stops the run after one request. Every request has a total deadline, even
against a server that trickles its reply a byte at a time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from metrobench.agents.prompts import user_message
from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.run import run_model
from metrobench.cli import main
from metrobench.transcripts.records import CaseRecord, ending, ending_kind, read_run
from metrobench.standins.json_server import DROP
from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call

IDS = ["MARTA-A-001", "MARTA-A-002", "MARTA-A-003", "MARTA-A-004"]
DECLINED = chat_payload('{"outcome": "request_declined"}')
ERROR_BODY = {"error": {"message": "server exploded", "type": "server_error"}}
#: llama-server's answer to a prompt longer than a slot's context (tools/server/server-context.cpp).
CONTEXT_BODY = {"error": {"code": 400, "message": "request (3517 tokens) exceeds the available context size "
                          "(2048 tokens), try increasing it", "type": "exceed_context_size_error",
                          "n_prompt_tokens": 3517, "n_ctx": 2048}}


def cfg(url: str, **kw) -> ModelConfig:
    base = {"name": "fake", "provider": "llama_cpp", "base_url": f"{url}/v1", "retries": 2,
            "backoff_s": 0.01, "concurrency": 1}
    return ModelConfig(**{**base, **kw})


def fast_config(tmp_path, **extra) -> str:
    """A model config file that retries quickly (the command line has no retry flags)."""
    path = tmp_path / "fake-1.yaml"
    lines = ["name: fake-1", "retries: 2", "backoff_s: 0.01"] + [f"{k}: {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(bench, config, ids, out, **kw):
    return run_model(config, bench.system("marta"), [bench.case(i) for i in ids], out,
                     progress_stream=open("/dev/null", "w"), **kw)


def cli(command, root, tmp_path, url, out, *, concurrency=1, ids=IDS):
    return main([command, "--data", str(root), "--system", "marta", "--model-config",
                 fast_config(tmp_path, concurrency=concurrency), "--base-url", f"{url}/v1",
                 "--cases", ",".join(ids), "--out", str(out)])


def error_lines(err: str) -> list[str]:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("metrobench: error:")]
    assert len(lines) == 1 and err.rstrip().splitlines()[-1] == lines[0], err
    return lines


def user_of(bench, case_id: str) -> str:
    return user_message(bench.case(case_id).raw["events"])


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# a stopped server, a refused key, an unknown model: one request, then the run stops

@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_stopped_server_stops_the_run_with_one_line(root, tmp_path, capsys, command):
    out = tmp_path / "t.jsonl"
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    code = cli(command, root, tmp_path, url, out, concurrency=2)
    assert code != 0 and time.monotonic() - start < 30
    captured = capsys.readouterr()
    [line] = error_lines(captured.err)
    assert f"the endpoint {url} never answered" in line and "stopped the run" in line
    assert "4 cases: 1 infrastructure (retryable), 3 not run (stopped)" in line
    [record] = read_run(out).records  # the one case that was sent; the others were not
    assert record.meta["ending_kind"] == "infrastructure" and record.meta["retryable"] is True


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refused_key_or_unknown_model_costs_exactly_one_request(root, tmp_path, capsys, status):
    out = tmp_path / "t.jsonl"
    body = {"error": {"message": "Incorrect API key provided" if status != 404 else
                      "The model `fake-1` does not exist", "type": "invalid_request_error"}}
    with FakeOpenAI(lambda r: (status, body)) as api:
        code = cli("run", root, tmp_path, api.url, out, concurrency=4)
        assert len(api.requests) == 1
    assert code != 0
    [line] = error_lines(capsys.readouterr().err)
    expected = "refused the key" if status != 404 else "knows no such model, deployment or path"
    assert expected in line and f"({status}: " in line and "3 not run (stopped)" in line
    # the endpoint fixed, a rerun does all four cases and succeeds
    with FakeOpenAI(lambda r: DECLINED) as api:
        assert cli("run", root, tmp_path, api.url, out, concurrency=4) == 0
        assert len(api.requests) == 4
    records = read_run(out).records
    assert sorted(r.case_id for r in records) == IDS
    assert all(r.meta["ending"] == "answered" and r.meta["ending_kind"] == "model" for r in records)


def test_a_key_revoked_mid_run_stops_it_before_the_remaining_cases(bench, tmp_path):
    answers = iter([DECLINED])

    def script(request):
        return next(answers, (401, {"error": {"message": "key revoked"}}))

    out = tmp_path / "t.jsonl"
    with FakeOpenAI(script) as api:
        summary = run(bench, cfg(api.url), IDS, out)
        assert len(api.requests) == 2  # the good case, the refused one; nothing after
    assert summary.stopped and "refused the key" in summary.stopped
    assert (summary.ran, summary.not_run) == (2, 2)
    assert summary.counts() == "4 cases: 1 answered, 1 infrastructure (retryable), 2 not run (stopped)"


# two of four cases whose connection drops (the server gone mid-request): the run fails, naming
# them, and a rerun redoes exactly them

def test_two_cases_dropped_fail_the_run_and_a_rerun_redoes_exactly_them(bench, root, tmp_path, capsys):
    down = {user_of(bench, i) for i in IDS[2:]}  # not the first case: the endpoint has answered by then
    asked: list[str] = []

    def script(request):
        user = request["body"]["messages"][1]["content"]
        asked.append(user)
        return DROP if user in down else DECLINED

    out = tmp_path / "t.jsonl"
    with FakeOpenAI(script) as api:
        assert cli("run", root, tmp_path, api.url, out) != 0
        captured = capsys.readouterr()
        [line] = error_lines(captured.err)
        assert "2 of 4 cases ended on the endpoint, not the model" in line
        assert all(f"{case_id}: APIConnectionError: Connection error." in line for case_id in IDS[2:]), line
        assert "4 cases: 2 answered, 2 infrastructure (retryable)" in line
        assert "endings: 4 cases: 2 answered, 2 infrastructure (retryable)" in captured.out
        assert len(api.requests) == 2 + 2 * 2  # two attempts for each dropped case
        first = out.read_text().splitlines()
        finished = [line for line in first[1:] if json.loads(line)["meta"]["ending"] == "answered"]
        down.clear()
        asked.clear()
        assert cli("run", root, tmp_path, api.url, out) == 0
    assert sorted(asked) == sorted(user_of(bench, i) for i in IDS[2:])  # exactly those two, once each
    captured = capsys.readouterr()
    assert "ran 2 cases (0 failed), 2 already done" in captured.out
    assert captured.out.rstrip().endswith("endings: 2 cases: 2 answered")
    header, *lines = out.read_text().splitlines()
    assert header == first[0] and lines[:2] == finished  # the header and the finished cases untouched
    assert sorted(json.loads(line)["case_id"] for line in lines) == IDS
    assert all(json.loads(line)["meta"]["ending_kind"] == "model" for line in lines)


@pytest.mark.parametrize(("protocol", "requests"), [({}, 1 + 3), ({"retry": True}, 3 + 3)])
def test_a_first_case_on_5xx_is_scored_and_does_not_stop_the_others(bench, tmp_path, protocol, requests):
    down = user_of(bench, IDS[0])
    with FakeOpenAI(lambda r: (500, ERROR_BODY) if r["body"]["messages"][1]["content"] == down
                    else DECLINED) as api:
        summary = run(bench, cfg(api.url, concurrency=4, retries=3, protocol=protocol), IDS, tmp_path / "t.jsonl")
        assert len(api.requests) == requests  # with the retry option, the failing case three times
    assert summary.stopped is None and summary.problem() is None
    assert summary.counts() == "4 cases: 3 answered, 1 refused by the endpoint"


def test_429_after_retries_is_scored_and_a_bad_retry_after_is_ignored(bench, tmp_path):
    headers = iter([{"retry-after": "-5"}, {"retry-after": "nan"}])

    def script(request):
        return 429, {"error": {"message": "rate limited"}}, next(headers, {})

    with FakeOpenAI(lambda r: DECLINED) as ok, FakeOpenAI(script) as busy:
        retrying = {"retry": True}  # honours retry-after: the bad ones fall back to the backoff
        run(bench, cfg(ok.url, protocol=retrying), IDS[:1], tmp_path / "t.jsonl")  # (the same file: resume)
        summary = run(bench, cfg(busy.url, protocol=retrying), IDS[:2], tmp_path / "t.jsonl")
        assert len(busy.requests) == 2
    assert summary.endings["refused"] == 1 and summary.problem() is None
    [record] = [r for r in read_run(tmp_path / "t.jsonl").records if r.case_id == IDS[1]]
    assert record.error.startswith("429: ") and ending_kind(record) == "model"


# the model's own endings are scored, never a failed run

def test_model_endings_are_recorded_and_the_run_succeeds(root, bench, tmp_path, capsys):
    def script(request):
        user = request["body"]["messages"][1]["content"]
        if user == user_of(bench, IDS[0]):
            return chat_payload("", [tool_call("line_info", {"line": "red"})])  # loops to the budget
        if user == user_of(bench, IDS[1]):
            return 400, {"error": {"code": 400, "message": "tools[3].function.parameters: not an object",
                                   "type": "invalid_request_error"}}
        if user == user_of(bench, IDS[2]):
            return 400, CONTEXT_BODY
        return DECLINED

    out = tmp_path / "t.jsonl"
    with FakeOpenAI(script) as api:
        code = main(["run", "--data", str(root), "--system", "marta", "--model-config", fast_config(tmp_path),
                     "--base-url", f"{api.url}/v1", "--cases", ",".join(IDS), "--max-rounds", "3",
                     "--out", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "metrobench: error" not in captured.err
    assert captured.out.rstrip().endswith(
        "endings: 4 cases: 1 answered, 1 round budget, 1 refused by the endpoint, 1 over the server's context")
    records = {r.case_id: r for r in read_run(out).records}
    endings = {i: (r.meta["ending"], r.meta["ending_kind"], r.meta["retryable"]) for i, r in records.items()}
    assert endings == {IDS[0]: ("round_budget", "model", False), IDS[1]: ("refused", "model", False),
                       IDS[2]: ("context", "context", False), IDS[3]: ("answered", "model", False)}
    over = records[IDS[2]]   # recorded as the reference records any refused request: never an answer
    assert over.error == "400: " + json.dumps(CONTEXT_BODY) and over.response is None
    assert over.meta["context"] == {"n_prompt_tokens": 3517, "n_ctx": 2048}
    assert "context" not in records[IDS[1]].meta


def test_records_without_the_new_fields_read_as_before(bench, tmp_path):
    """Old transcripts: the ending is derived; a retryable record is redone, the rest kept."""
    legacy = [
        CaseRecord(IDS[0], "fake", "marta", response={"outcome": "request_declined"}),
        CaseRecord(IDS[1], "fake", "marta", error="Exhausted 20 tool call rounds"),
        CaseRecord(IDS[2], "fake", "marta", error="503: overloaded", meta={"retryable": True}),
        CaseRecord(IDS[3], "fake", "marta", error="401: no key", meta={"retryable": False}),
    ]
    assert [(ending(r), ending_kind(r)) for r in legacy] == [
        ("answered", "model"), ("round_budget", "model"), ("infrastructure", "infrastructure"),
        ("refused", "model")]
    # A context overflow: derived from its body where nothing is recorded (a reference result
    # file); an ending a runner recorded before the kind existed is read as recorded.
    overflow = "400: " + json.dumps(CONTEXT_BODY)
    older = "400: " + json.dumps({"error": {"code": 400, "message": "the request exceeds the available "
                                            "context size, try increasing it", "type": "invalid_request_error"}})
    assert [(ending(r), ending_kind(r)) for r in (
        CaseRecord(IDS[0], error=overflow), CaseRecord(IDS[0], error=older),
        CaseRecord(IDS[0], error=overflow, meta={"ending": "refused", "ending_kind": "model"}),
        CaseRecord(IDS[0], error="413: " + json.dumps(CONTEXT_BODY)))] == [
        ("context", "context"), ("context", "context"), ("refused", "model"), ("refused", "model")]
    config = cfg("http://127.0.0.1:9")
    out = tmp_path / "t.jsonl"
    for record in legacy:
        record.meta.update(config=config.fingerprint(), case_sha=_case_sha(bench, record.case_id))
    out.write_text("".join(r.to_json() + "\n" for r in legacy))
    with FakeOpenAI(lambda r: DECLINED) as api:
        summary = run(bench, cfg(api.url), IDS, out)
        assert len(api.requests) == 1  # only the retryable one
    assert (summary.ran, summary.skipped, summary.problem()) == (1, 3, None)
    assert [json.loads(line) for line in out.read_text().splitlines()[:3]] == \
        [json.loads(r.to_json()) for r in legacy if r.case_id != IDS[2]]


def _case_sha(bench, case_id: str) -> str:
    from metrobench.agents.runner.run import case_hash
    return case_hash(bench.case(case_id))


# a total deadline per request: a server trickling its reply a byte at a time

class TrickleServer:
    """Answers the cases in ``slow`` (by user message) one byte every 20 ms, the rest at once."""

    def __init__(self, slow: set[str], body: bytes) -> None:
        self.requests = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests += 1
                trickle = request["messages"][1]["content"] in slow
                data = body if trickle else json.dumps(DECLINED).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                try:
                    for i in range(len(data)) if trickle else [None]:
                        self.wfile.write(data[i:i + 1] if trickle else data)
                        self.wfile.flush()
                        if trickle:
                            time.sleep(0.02)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: the deadline worked

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "TrickleServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


#: A valid reply that takes 100 s to trickle (5,000 bytes at 20 ms): each read is quick, the whole is not.
SLOW_BODY = json.dumps(chat_payload('{"outcome": "request_declined"}' + " " * 5000)).encode()


def test_a_trickling_reply_is_cut_at_the_total_deadline_and_the_run_goes_on(bench, tmp_path):
    with TrickleServer({user_of(bench, IDS[1])}, SLOW_BODY) as server:
        start = time.monotonic()
        summary = run(bench, cfg(server.url, timeout_s=1), IDS[:3], tmp_path / "t.jsonl")
        assert time.monotonic() - start < 60  # generous: the trickle alone would take 100 s
        assert server.requests == 1 + 1 + 1  # the slow case once: the reference retries no time-out
    records = {r.case_id: r for r in read_run(tmp_path / "t.jsonl").records}
    slow = records[IDS[1]]
    assert slow.error == "timeout: no complete reply within 1 s (timeout_s)"
    assert (slow.meta["ending"], slow.meta["ending_kind"], slow.meta["retryable"]) == ("timeout", "model", False)
    assert records[IDS[0]].error is None and records[IDS[2]].error is None
    assert summary.stopped is None and summary.problem() is None


def test_a_trickling_first_reply_ends_its_case_and_the_others_run(bench, tmp_path):
    with TrickleServer({user_of(bench, i) for i in IDS}, SLOW_BODY) as server:
        summary = run(bench, cfg(server.url, timeout_s=1, concurrency=4), IDS, tmp_path / "t.jsonl")
        assert server.requests == 4  # the server took the first request: it is there; every case asked once
    assert summary.stopped is None and summary.counts() == "4 cases: 4 time-out"

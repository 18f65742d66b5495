"""Issue 50, items 2 and 5: progress while a run runs, and the concurrency of a local endpoint.

The progress lines are tested from given events and a fake clock (:class:`Progress` takes the
clock, the interval and whether its stream is a terminal), never from the time a test takes;
the run's wiring (the loop's round events, the reporter task, the first line) against the
OpenAI stand-in. The concurrency of ``provider: openai`` on a loopback ``base_url``: the
server's ``/props`` slot count where it answers, else 2, unless ``concurrency`` is set.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time

from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.loop import run_case
from metrobench.agents.runner.replies import ChatReply
from metrobench.agents.runner.run import Progress, duration, eta_s, run_model
from metrobench.agents.runner.slots import props_url, run_concurrency, server_slots
from metrobench.cli import main
from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call
from metrobench.transcripts.records import CaseRecord


class Clock:
    """A clock the test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def done(case_id: str, tokens: int = 0, error: str | None = None) -> CaseRecord:
    return CaseRecord(case_id=case_id, model="m", system="marta", output_tokens=tokens, error=error)


def progress(total: int = 12, *, tty: bool = False, interval: float = 10.0, **kw) -> tuple[Progress, Clock, io.StringIO]:
    clock, stream = Clock(), io.StringIO()
    return Progress(total, "m/marta", stream, interval=interval, clock=clock, tty=tty, **kw), clock, stream


# --- the arithmetic ------------------------------------------------------------------------------

def test_eta_is_the_pace_of_the_cases_so_far():
    assert eta_s(3, 12, 130.0) == 390.0          # 130 s for 3 cases: 9 more take 390 s
    assert eta_s(0, 12, 50.0) is None            # no case ended yet: no pace
    assert eta_s(12, 12, 600.0) == 0.0
    assert eta_s(6, 12, 60.0) == 60.0            # concurrency is in the pace: half done, as long again
    assert [duration(s) for s in (0, 45, 59.6, 130, 3599, 3600, 3900, 90061)] == [
        "0s", "45s", "1m00s", "2m10s", "59m59s", "1h00m", "1h05m", "25h01m"]


# --- the lines, from events ------------------------------------------------------------------------

def test_the_log_line_names_the_case_running_long_with_its_round_and_seconds():
    p, clock, stream = progress()
    clock.now = 20.0
    p.round_started("MARTA-A-001", 1)
    clock.now = 35.0
    p.round_started("MARTA-A-004", 1)
    for when, case_id in ((40.0, "MARTA-A-001"), (60.0, "MARTA-A-002"), (80.0, "MARTA-A-003")):
        clock.now = when
        p.round_started(case_id, 1)
        p.update(done(case_id, tokens=433 if case_id != "MARTA-A-003" else 434))
    clock.now = 100.0
    p.round_started("MARTA-A-004", 3)
    clock.now = 130.0
    p.tick()
    lines = stream.getvalue().splitlines()
    assert lines[-1] == "m/marta: 3/12 cases, 0 failed, 10 tok/s, 2m10s elapsed, ETA 6m30s; MARTA-A-004 round 3, 95 s"
    # at most one line every interval (10 s): the cases ending at 40 and 60 s put one line each (10 s
    # apart or more), the one at 80 s another, the tick at 130 s the last
    assert len(lines) == 4


def test_lines_come_at_most_once_an_interval_and_a_short_case_is_not_named():
    p, clock, stream = progress(interval=10.0, long_case_s=30.0)
    p.round_started("MARTA-A-001", 1)
    for now in (1.0, 5.0, 9.9):
        clock.now = now
        p.tick()
    assert stream.getvalue() == ""
    clock.now = 10.0
    p.tick()
    clock.now = 15.0
    p.update(done("MARTA-A-001", error="timeout"))   # within the interval: no line
    p.tick()
    assert stream.getvalue() == "m/marta: 0/12 cases, 0 failed, 0 tok/s, 10s elapsed\n"
    clock.now = 20.0
    p.round_started("MARTA-A-002", 1)
    clock.now = 29.0
    p.tick()
    # 9 s into its case: not long; one case of 12 in 29 s: 11 more take 319 s
    assert stream.getvalue().splitlines()[-1] == "m/marta: 1/12 cases, 1 failed, 0 tok/s, 29s elapsed, ETA 5m19s"


def test_several_long_cases_name_the_longest_and_count_the_others():
    p, clock, stream = progress(total=4, long_case_s=30.0)
    for case_id, when in (("A", 0.0), ("B", 5.0), ("C", 40.0)):
        clock.now = when
        p.round_started(case_id, 1)
    clock.now = 50.0
    p.round_started("A", 7)
    p.tick()
    assert stream.getvalue().splitlines()[-1].endswith("; A round 7, 50 s (and 1 more over 30 s)")


def test_the_last_case_always_prints_the_totals_line():
    p, clock, stream = progress(total=2)
    clock.now = 1.0
    p.update(done("MARTA-A-001", tokens=100))
    clock.now = 2.0
    p.update(done("MARTA-A-002", tokens=100))
    # the case-ending line as before ("N/N cases, F failed, T tok/s"), the elapsed time after it, no ETA
    assert stream.getvalue() == "m/marta: 2/2 cases, 0 failed, 100 tok/s, 2s elapsed\n"


def test_replies_cut_at_max_tokens_are_said_once():
    p, clock, stream = progress(max_tokens=4096)
    p.round_started("MARTA-A-001", 1)
    p.round_ended("MARTA-A-001", 1, "stop")
    p.round_ended("MARTA-A-001", 2, "tool_calls")
    p.round_ended("MARTA-A-001", 3, "length")
    p.round_ended("MARTA-A-002", 1, "length")
    assert stream.getvalue() == ""                               # two are not "keep hitting"
    for round_no in range(4, 10):
        p.round_ended("MARTA-A-001", round_no, "length")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith('m/marta: note: 3 replies so far stopped at max_tokens (4,096 tokens), '
                               'finish_reason "length"')
    assert lines[0].endswith("said once")


def test_on_a_terminal_a_bar_redrawn_in_place():
    p, clock, stream = progress(total=4, tty=True, interval=1.0, max_tokens=512)
    p.begin("2 at a time (the default for provider llama_cpp)")
    clock.now = 1.0
    p.update(done("MARTA-A-001", tokens=10))
    assert stream.getvalue() == ("m/marta: 4 cases to run, 2 at a time (the default for provider llama_cpp)\n"
                                 "\rm/marta: [#####...............] 1/4 cases, 0 failed, 10 tok/s, 1s elapsed, ETA 3s")
    # the notice breaks the drawn line first, then stands on its own
    for round_no in (1, 2, 3):
        p.round_ended("MARTA-A-002", round_no, "length")
    assert stream.getvalue().endswith("ETA 3s\nm/marta: note: 3 replies so far stopped at max_tokens (512 tokens), "
                                      'finish_reason "length": they are cut short and take the longest; a larger '
                                      "max_tokens lets them finish, a smaller one bounds each round (either changes "
                                      "the settings fingerprint); said once\n")
    clock.now = 1.5
    p.tick()                                                  # within the interval (1 s): nothing
    clock.now = 2.0
    p.update(done("MARTA-A-002", tokens=38))
    clock.now = 3.0
    p.update(done("MARTA-A-003"))
    last = stream.getvalue().split("\r")[-1]
    assert last.startswith("m/marta: [###############.....] 3/4 cases") and "\n" not in last
    clock.now = 4.0
    p.update(done("MARTA-A-004"))
    final = stream.getvalue().split("\r")[-1]
    # padded with blanks over the longer line before it (which had an ETA), then the line ends
    assert final == "m/marta: [####################] 4/4 cases, 0 failed, 12 tok/s, 4s elapsed".ljust(len(last)) + "\n"


def test_a_shorter_line_on_a_terminal_clears_the_longer_one():
    p, clock, stream = progress(total=3, tty=True, interval=1.0, long_case_s=1.0)
    p.round_started("MARTA-A-001", 4)
    clock.now = 5.0
    p.tick()
    long_line = stream.getvalue().split("\r")[-1]
    assert long_line.endswith("; MARTA-A-001 round 4, 5 s")
    clock.now = 6.0
    p.update(done("MARTA-A-001"))
    short_line = stream.getvalue().split("\r")[-1]
    assert len(short_line) == len(long_line) and short_line.rstrip().endswith("ETA 12s")


def test_default_intervals_follow_the_stream():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress(3, "m/s", Terminal()).interval == 1.0 and Progress(3, "m/s", Terminal()).tty
    assert Progress(3, "m/s", io.StringIO()).interval == 10.0 and not Progress(3, "m/s", io.StringIO()).tty
    assert Progress(3, "m/s", io.StringIO(), interval=2.5).interval == 2.5


# --- the loop tells its observer --------------------------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def round_started(self, case_id: str, round_no: int) -> None:
        self.events.append(("start", case_id, round_no))

    def round_ended(self, case_id: str, round_no: int, finish_reason: str | None) -> None:
        self.events.append(("end", case_id, round_no, finish_reason))


class TwoRounds:
    """A tool call, then a plain answer cut at max_tokens."""

    def __init__(self) -> None:
        self.replies = [ChatReply({"role": "assistant", "content": None, "tool_calls": [
                            tool_call("line_info", {"line": "red"})]}, "tool_calls", 100, 20),
                        ChatReply({"role": "assistant", "content": "Take the red line"}, "length", 100, 4096)]

    async def complete(self, messages, tools) -> ChatReply:
        return self.replies.pop(0)


def test_the_loop_reports_each_round_start_and_end(bench):
    observer = Recorder()
    record = asyncio.run(run_case(TwoRounds(), bench.system("marta"), bench.case("MARTA-A-001"), model="m",
                                  max_rounds=5, observer=observer))
    assert record.api_rounds == 2 and record.error is None    # how the case ends is not the observer's
    assert observer.events == [("start", "MARTA-A-001", 1), ("end", "MARTA-A-001", 1, "tool_calls"),
                               ("start", "MARTA-A-001", 2), ("end", "MARTA-A-001", 2, "length")]


# --- the run: first line, reporter, concurrency -------------------------------------------------

def openai_cfg(url: str, **kw) -> ModelConfig:
    return ModelConfig(**{"name": "mine", "provider": "openai", "base_url": f"{url}/v1", "retries": 2,
                          "backoff_s": 0.01, **kw})


def answer(request):
    return chat_payload('{"outcome": "request_declined"}')


def test_props_url_is_beside_the_api():
    assert props_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/props"
    assert props_url("http://localhost:8080/v1/") == "http://localhost:8080/props"
    assert props_url("http://[::1]:8080") == "http://[::1]:8080/props"
    assert props_url("http://127.0.0.1:9000/llama/v1") == "http://127.0.0.1:9000/llama/props"


def test_a_local_server_s_slots_give_the_concurrency(bench, tmp_path):
    with FakeOpenAI(answer, props={"total_slots": 3, "default_generation_settings": {"n_ctx": 8192}}) as api:
        assert run_concurrency(openai_cfg(api.url)) == (
            3, f"the local server's 3 slots, from {api.url}/props")
        stream = io.StringIO()
        summary = run_model(openai_cfg(api.url), bench.system("marta"), [bench.case("MARTA-A-001")],
                            tmp_path / "t.jsonl", progress_stream=stream)
    assert summary.ran == 1
    assert [g["path"] for g in api.gets] == ["/props", "/props"]      # asked once a run
    assert [r["path"] for r in api.requests] == ["/v1/chat/completions"]  # the POSTs as before
    first, *rest = stream.getvalue().splitlines()
    assert first == f"mine/marta: 1 case to run, 3 at a time (the local server's 3 slots, from {api.url}/props)"
    assert rest[-1].startswith("mine/marta: 1/1 cases, 0 failed, ")


def test_no_slot_count_means_two(tmp_path):
    with FakeOpenAI(answer) as api:                                    # no /props: 404
        parallel, why = run_concurrency(openai_cfg(api.url))
        assert api.gets and api.requests == []
    assert parallel == 2 and why == (f"a local endpoint: no slot count from {api.url}/props, so 2; "
                                     "set concurrency to the server's slots")
    for props in ({"total_slots": "four"}, {"total_slots": 0}, {"total_slots": True}, {}, [3]):
        with FakeOpenAI(answer, props=props) as api:
            assert run_concurrency(openai_cfg(api.url))[0] == 2, props
    with socket.socket() as sock:                                      # nothing listening there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert server_slots(f"http://127.0.0.1:{port}/v1", timeout_s=1.0) is None
    assert run_concurrency(openai_cfg(f"http://127.0.0.1:{port}"))[0] == 2


def test_an_explicit_concurrency_wins_and_no_server_is_asked():
    with FakeOpenAI(answer, props={"total_slots": 3}) as api:
        assert run_concurrency(openai_cfg(api.url, concurrency=5)) == (5, "concurrency as configured")
        assert run_concurrency(openai_cfg(api.url, provider="llama_cpp")) == (
            2, "the default for provider llama_cpp")
        assert api.gets == []
    hosted = openai_cfg("https://api.example.com", api_key_env="OPENAI_API_KEY")
    assert run_concurrency(hosted) == (8, "the default for provider openai")    # hosted: never asked


def test_concurrency_stays_out_of_the_settings_and_fingerprint():
    local = openai_cfg("http://127.0.0.1:8080")
    assert local.parallel == 2 and openai_cfg("http://localhost:1").parallel == 2
    assert openai_cfg("http://[::1]:8080").parallel == 2
    assert openai_cfg("https://api.example.com").parallel == 8
    assert openai_cfg("http://127.0.0.1:8080", concurrency=6).parallel == 6
    assert "concurrency" not in local.settings()
    assert local.fingerprint() == openai_cfg("http://127.0.0.1:8080", concurrency=6).fingerprint()


def test_help_says_what_local_means(capsys):
    try:
        main(["run", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert ("default: 2 local, 4 Mistral, 8 Azure and hosted OpenAI; local means provider llama_cpp, or openai "
            "with a base_url on 127.0.0.1, localhost or ::1") in text
    assert "--progress SECONDS" in text


def test_a_case_running_long_is_shown_while_it_runs(bench, tmp_path, monkeypatch):
    """The reporter task prints while a case is in flight: the stand-in holds its first reply until the
    status line naming the case and its round has been printed (no timing asserted)."""
    monkeypatch.setattr(Progress, "LONG_CASE_S", 0.0)
    stream = io.StringIO()
    shown = threading.Event()

    def script(request):
        if len(request["body"]["messages"]) == 2:          # the case's first round
            deadline = time.monotonic() + 20
            while "MARTA-A-001 round 1" not in stream.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            shown.set()
            return chat_payload(None, [tool_call("line_info", {"line": "red"})])
        return chat_payload('{"outcome": "request_declined"}', finish_reason="stop")

    with FakeOpenAI(script, props={"total_slots": 1}) as api:
        summary = run_model(openai_cfg(api.url), bench.system("marta"), [bench.case("MARTA-A-001")],
                            tmp_path / "t.jsonl", progress_stream=stream, progress_interval=0.05)
    assert shown.is_set() and summary.ran == 1
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("1 at a time (the local server's 1 slot, from " + api.url + "/props)")
    during = next(line for line in lines if "MARTA-A-001 round 1" in line)
    assert during.startswith("mine/marta: 0/1 cases, 0 failed, ") and "elapsed" in during
    assert lines[-1].startswith("mine/marta: 1/1 cases, 0 failed, ")
    assert json.loads((tmp_path / "t.jsonl").read_text().splitlines()[1])["case_id"] == "MARTA-A-001"


def test_run_and_eval_take_progress(tmp_path):
    from metrobench.cli import build_parser

    parser = build_parser()
    for command in (["run", "--system", "marta", "--out", "x.jsonl"], ["eval"]):
        assert parser.parse_args([*command, "--progress", "2"]).progress == 2.0
        assert parser.parse_args(command).progress is None


def test_an_eta_appears_during_eval_against_a_slow_stand_in(root, tmp_path, monkeypatch, capsys):
    """Issue 50's acceptance: the stand-in answers the first case at once and holds every later one
    until a status line with an ETA has been printed (so it came while a case was in flight)."""
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    held = []

    def script(request):
        if len(api.requests) > 1:          # one request a case, one case at a time: a later case
            deadline = time.monotonic() + 20
            while "ETA" not in err.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            held.append("ETA" in err.getvalue())
        return chat_payload('{"outcome": "request_declined"}')

    with FakeOpenAI(script) as api:
        assert main(["eval", "--data", str(root), "--model", "mine", "--provider", "openai", "--base-url",
                     f"{api.url}/v1", "--system", "doha", "--partition", "all", "--sample", "3",
                     "--concurrency", "1", "--results", str(tmp_path / "results"), "--progress", "0.05"]) == 0
    assert held == [True, True]
    lines = err.getvalue().splitlines()
    assert lines[0] == "mine/doha: 3 cases to run, 1 at a time (concurrency as configured)"
    during = next(line for line in lines if "ETA" in line)
    assert during.startswith(("mine/doha: 1/3 cases, 0 failed, ", "mine/doha: 2/3 cases, 0 failed, "))
    assert lines[-1].startswith("mine/doha: 3/3 cases, 0 failed, ") and "ETA" not in lines[-1]
    assert "ran 3 cases (0 failed), 0 already done" in capsys.readouterr().out

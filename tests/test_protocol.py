"""Every case ends as the paper's harness ended it, unless a protocol option says otherwise.

One scripted OpenAI-compatible endpoint (real HTTP on 127.0.0.1) plays each situation in which
metrobench and the reference runner (``harness/runner.py``, spec §6.5-6.6) used to part ways;
each test shows the reference's ending under the default protocol and what the named option
changes (metrobench/agents/runner/protocol.py). Time-outs are a server that never answers
until the test ends, so no verdict depends on the machine's speed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from metrobench.agents.prompts import TOOLS
from metrobench.agents.runner.config import ModelConfig, parse_model_config
from metrobench.agents.runner.protocol import PAPER, Protocol
from metrobench.agents.runner.run import run_model
from metrobench.errors import MetrobenchError
from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call
from metrobench.transcripts.records import ending, ending_kind, read_run

IDS = ["MARTA-A-001", "MARTA-A-002", "MARTA-A-003"]
DECLINED = chat_payload('{"outcome": "request_declined"}')
ERROR_BODY = {"error": {"message": "server exploded", "type": "server_error"}}
LINE_INFO = {"line": "Red"}
RETRY = {"retry": True}
FEEDBACK = {"argument_feedback": True}


def cfg(url: str, protocol: dict | None = None, **kw) -> ModelConfig:
    base = {"name": "fake", "provider": "llama_cpp", "base_url": f"{url}/v1", "retries": 2,
            "backoff_s": 0.01, "concurrency": 1, "timeout_s": 0.5, "protocol": protocol or {}}
    return ModelConfig(**{**base, **kw})


class Endpoint(FakeOpenAI):
    """A scripted endpoint: ``script(case_round, request)`` per request, ``case_round`` counted per case
    (by its user message); ``"hang"`` holds the request until the test ends (a time-out)."""

    def __init__(self, script) -> None:
        self.release = threading.Event()
        self.rounds: Counter[str] = Counter()
        super().__init__(self._answer)
        self.case_script = script

    def _answer(self, request: dict):
        user = request["body"]["messages"][1]["content"]
        with self.lock:
            self.rounds[user] += 1
            number = self.rounds[user]
        answer = self.case_script(number, request)
        if answer == "hang":
            self.release.wait(60)
            return DECLINED
        return answer

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        super().__exit__(*exc)


def run_one(bench, tmp_path, script, protocol=None, ids=IDS[:1], **kw):
    """The cases run against ``script``: ``(records by case id, run summary, requests sent)``."""
    out = tmp_path / "run.jsonl"
    with Endpoint(script) as server:
        summary = run_model(cfg(server.url, protocol, **kw), bench.system("marta"),
                            [bench.case(i) for i in ids], out, progress_stream=open("/dev/null", "w"))
        requests = list(server.requests)
    return {r.case_id: r for r in read_run(out).records}, summary, requests


def scored(record, kind: str, error_start: str) -> None:
    """``record`` ended with an error of ending ``kind``: the model's, scored, never redone."""
    assert record.error is not None and record.error.startswith(error_start), record.error
    assert record.response is None
    assert (ending(record), ending_kind(record), record.meta["retryable"]) == (kind, "model", False)


# --- what a live endpoint answers instead of a reply -------------------------------------------

def test_a_round_that_never_answers_ends_the_case_scored_and_the_run_succeeds(bench, tmp_path):
    records, summary, requests = run_one(bench, tmp_path, lambda n, r: "hang", ids=IDS[:2])
    for record in records.values():
        scored(record, "timeout", "timeout: no complete reply within 0.5 s (timeout_s)")
    assert len(requests) == 2  # one request a case: the reference does not retry a time-out
    assert summary.problem() is None and summary.stopped is None
    # with the retry option: retried (2 attempts), then the same ending; never an endless rerun
    records, summary, requests = run_one(bench, tmp_path / "r", lambda n, r: "hang", RETRY)
    scored(records[IDS[0]], "timeout", "timeout:")
    assert len(requests) == 2 and summary.problem() is None
    assert records[IDS[0]].meta["protocol"] == [{"round": 1, "option": "retry", "failures": ["timeout"],
                                                 "calls_before": 0}]


@pytest.mark.parametrize(("answer", "kind", "error"), [
    ((500, ERROR_BODY), "refused", '500: {"error": {"message": "server exploded"'),
    ((503, b"<html>busy</html>"), "refused", "503: <html>busy</html>"),
    ((200, b"not json at all"), "malformed", "malformed reply: HTTP 200 body is not JSON"),
    ((200, {"choices": []}), "malformed", "malformed reply: HTTP 200 body has no choices[0].message"),
])
def test_an_answer_that_is_not_a_reply_every_time_ends_the_case_scored(bench, tmp_path, answer, kind, error):
    records, summary, requests = run_one(bench, tmp_path, lambda n, r: answer)
    scored(records[IDS[0]], kind, error)
    assert len(requests) == 1 and summary.problem() is None


def test_429_for_ever_is_retried_as_the_reference_retries_it_then_scored(bench, tmp_path):
    records, summary, requests = run_one(bench, tmp_path, lambda n, r: (429, ERROR_BODY), retries=5)
    scored(records[IDS[0]], "refused", "429: ")
    assert len(requests) == 5  # the reference's five attempts
    assert records[IDS[0]].meta["retried"] == [{"round": 1, "failures": ["429"] * 4}]
    assert "protocol" not in records[IDS[0]].meta  # the reference retries 429 too: no option intervened
    assert summary.problem() is None


def test_the_first_request_of_a_run_timing_out_ends_that_case_and_the_others_run(bench, tmp_path):
    first, guard = [], threading.Lock()

    def script(number, request):
        with guard:
            first.append(request)
            hang = len(first) == 1
        return "hang" if hang else DECLINED

    records, summary, requests = run_one(bench, tmp_path, script, ids=IDS, concurrency=3)
    endings = Counter(ending(r) for r in records.values())
    assert endings == {"timeout": 1, "answered": 2}
    assert summary.stopped is None and summary.problem() is None and len(requests) == 3


@pytest.mark.parametrize("failure", [(500, ERROR_BODY), "hang", (200, {"choices": []})])
def test_one_failure_then_normal_ends_the_case_by_default_and_is_retried_by_the_option(bench, tmp_path, failure):
    def script(number, request):
        return failure if number == 1 else DECLINED

    records, _, _ = run_one(bench, tmp_path, script)
    assert records[IDS[0]].error is not None and records[IDS[0]].response is None
    records, _, requests = run_one(bench, tmp_path / "r", script, RETRY)
    assert records[IDS[0]].error is None and records[IDS[0]].response == {"outcome": "request_declined"}
    assert len(requests) == 2 and records[IDS[0]].meta["protocol"][0]["option"] == "retry"


# --- what the model wrote -----------------------------------------------------------------------

def _call_then_declined(call):
    def script(number, request):
        return chat_payload(None, [call]) if number == 1 else DECLINED
    return script


BAD_CALLS = [
    (tool_call("line_info", '{"line": '), "Expecting value: line 1 column 10 (char 9)"),
    (tool_call("line_info", ""), "Expecting value: line 1 column 1 (char 0)"),
    ({"id": "c", "type": "function", "function": {"name": "line_info", "arguments": {"line": "Red"}}},
     "the JSON object must be str, bytes or bytearray, not dict"),
]


@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
def test_unreadable_arguments_end_the_case_with_the_exception_unless_fed_back(bench, tmp_path, call, error):
    records, _, requests = run_one(bench, tmp_path, _call_then_declined(call))
    record = records[IDS[0]]
    assert record.error == error and record.response is None and len(requests) == 1
    assert (ending(record), ending_kind(record)) == ("arguments", "model")
    assert record.tool_calls_made == []  # the case ended on reading it, before any call ran
    records, _, requests = run_one(bench, tmp_path / "f", _call_then_declined(call), FEEDBACK)
    record = records[IDS[0]]
    assert record.error is None and record.response == {"outcome": "request_declined"} and len(requests) == 2
    assert record.meta["protocol"] == [{"round": 1, "option": "argument_feedback", "call": "line_info",
                                        "calls_before": 0}]


def test_a_call_without_an_id_runs_then_ends_the_case_as_the_reference_did(bench, tmp_path):
    call = {"type": "function", "function": {"name": "line_info", "arguments": json.dumps(LINE_INFO)}}
    records, _, requests = run_one(bench, tmp_path, _call_then_declined(call))
    record = records[IDS[0]]
    assert record.error == "'id'" and ending(record) == "arguments" and len(requests) == 1
    assert [c["name"] for c in record.tool_calls_made] == ["line_info"]  # it ran before the KeyError
    records, _, requests = run_one(bench, tmp_path / "f", _call_then_declined(call), FEEDBACK)
    assert records[IDS[0]].error is None and len(requests) == 2


def test_earlier_calls_of_the_message_run_before_an_unreadable_one_ends_the_case(bench, tmp_path):
    calls = [tool_call("line_info", LINE_INFO, "a"), tool_call("line_info", "{oops", "b")]
    records, _, _ = run_one(bench, tmp_path, lambda n, r: chat_payload(None, calls))
    record = records[IDS[0]]
    assert [c["arguments"] for c in record.tool_calls_made] == [LINE_INFO]
    assert record.error.startswith("Expecting property name enclosed in double quotes")
    # the conversation holds the reply as the endpoint gave it, then the one answered call
    assert [m["role"] for m in record.messages[2:]] == ["assistant", "tool"]
    assert record.messages[2]["content"] is None


def test_a_text_tool_call_is_a_plain_text_ending_unless_the_parser_is_on(bench, tmp_path):
    text = '<tool_call>{"name": "line_info", "arguments": {"line": "Red"}}</tool_call>'

    def script(number, request):
        return chat_payload(text) if number == 1 else DECLINED

    records, _, requests = run_one(bench, tmp_path, script)
    record = records[IDS[0]]
    assert record.error is None and record.response is None and record.raw_content == text
    assert record.tool_calls_made == [] and len(requests) == 1
    records, _, requests = run_one(bench, tmp_path / "p", script, {"tool_parser": "auto"})
    record = records[IDS[0]]
    assert [c["name"] for c in record.tool_calls_made] == ["line_info"] and len(requests) == 2
    assert record.meta["protocol"] == [{"round": 1, "option": "tool_parser", "calls": 1,
                                        "calls_before": 0}]


@pytest.mark.parametrize("protocol", [None, {"retry": True, "argument_feedback": True, "tool_parser": "auto"}])
def test_empty_rounds_two_and_four_end_the_case_the_count_never_reset(bench, tmp_path, protocol):
    def script(number, request):
        if number in (1, 3):
            return chat_payload(None, [tool_call("line_info", LINE_INFO, f"c{number}")])
        return chat_payload("") if number in (2, 4) else DECLINED

    records, _, requests = run_one(bench, tmp_path, script, protocol)
    record = records[IDS[0]]
    assert record.error.startswith("empty-response retry exhausted: 2 empty rounds") and len(requests) == 4
    assert record.empty_rounds == 2 and ending(record) == "empty_replies"


def test_a_reply_of_whitespace_is_an_empty_round(bench, tmp_path):
    records, _, requests = run_one(bench, tmp_path, lambda n, r: chat_payload(" \n\t ") if n == 1 else DECLINED)
    record = records[IDS[0]]
    assert record.error is None and record.response == {"outcome": "request_declined"}
    assert record.empty_rounds == 1 and len(requests) == 2


def test_truncated_is_set_only_on_an_empty_round_cut_at_the_limit(bench, tmp_path):
    records, _, _ = run_one(bench, tmp_path, lambda n, r: chat_payload('{"outcome": "req', finish_reason="length"))
    record = records[IDS[0]]
    assert record.error is None and record.truncated is False and record.raw_content == '{"outcome": "req'
    records, _, _ = run_one(bench, tmp_path / "e", lambda n, r: chat_payload("", finish_reason="length"))
    record = records[IDS[0]]
    assert record.truncated is True and record.empty_rounds == 1 and ending(record) == "token_limit"


# --- what the model is sent ---------------------------------------------------------------------

def test_the_request_body_and_tools_are_the_references(bench, tmp_path):
    script = _call_then_declined(tool_call("line_info", LINE_INFO))
    _, _, requests = run_one(bench, tmp_path, script)
    first, second = (r["body"] for r in requests)
    assert "tool_choice" not in first
    assert second["messages"][2] == {"role": "assistant", "content": None,
                                     "tool_calls": [tool_call("line_info", LINE_INFO)]}
    functions = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert "required" not in functions["line_info"] and "required" not in functions["disruption_feed"]
    assert functions["knowledge_base"]["required"] == []
    summary = functions["submit_assistant_state"]["properties"]["fare_quote"]["properties"]["passenger_summary"]
    assert {k: v.get("default") for k, v in summary["properties"].items()} == \
        {"adults": 0, "children": 0, "seniors": 0, "disabled": 0, "free_riders": 0}
    assert first["tools"] == TOOLS


# --- the one exception, and the settings ------------------------------------------------------

def test_an_endpoint_that_is_not_there_stays_infrastructure(bench, tmp_path):
    from tests.test_run_failures import free_port

    out = tmp_path / "down.jsonl"
    summary = run_model(cfg(f"http://127.0.0.1:{free_port()}"), bench.system("marta"),
                        [bench.case(i) for i in IDS], out, progress_stream=open("/dev/null", "w"))
    assert summary.stopped is not None and "never answered" in summary.stopped
    record = read_run(out).records[0]
    assert ending(record) == "infrastructure" and record.meta["retryable"] is True


def test_the_protocol_is_a_recorded_setting_of_the_fingerprint():
    paper = ModelConfig(name="m")
    assert paper.protocol == PAPER and paper.protocol.is_paper and paper.tool_choice is None
    assert paper.settings()["protocol"] == {"retry": False, "argument_feedback": False, "tool_parser": "none"}
    prints = {ModelConfig(name="m", protocol=p).fingerprint()
              for p in ({}, RETRY, FEEDBACK, {"tool_parser": "auto"}, {"tool_parser": "hermes"})}
    assert len(prints) == 5
    assert Protocol(retry=True, tool_parser="auto").options() == ["retry", "tool_parser=auto"]
    assert "protocol" not in ModelConfig(name="r", provider="scripted").settings()  # no endpoint, no protocol
    with pytest.raises(MetrobenchError, match="field protocol.retries: Extra inputs are not permitted"):
        parse_model_config({"name": "m", "protocol": {"retries": True}})


# --- what each option changed, measured -----------------------------------------------------------

def test_the_options_table_undoes_each_option_as_a_paper_protocol_run_ends_its_cases(bench, tmp_path):
    """A run with every option, tabulated with the options undone, scores as the same endpoint run
    under the paper's protocol: the counterfactual is the measurement, not an estimate."""
    from metrobench.paper.protocol_options import options_table

    text = '<tool_call>{"name": "line_info", "arguments": {"line": "Red"}}</tool_call>'
    submit_text = '{"outcome": "request_declined", "kiosk_action": {"action": "display_info"}}'
    def script(number, request):
        first_user = request["body"]["messages"][1]["content"]
        which = IDS.index(next(i for i in IDS if first_user == _user(bench, i)))
        if which == 0:   # a text tool call, then an answer
            return chat_payload(text) if number == 1 else chat_payload(submit_text)
        if which == 1:   # a call, a 500, then an answer
            if number == 1:
                return chat_payload(None, [tool_call("line_info", LINE_INFO)])
            return (500, ERROR_BODY) if number == 2 else chat_payload(submit_text)
        return chat_payload(submit_text)   # untouched

    every = {"retry": True, "argument_feedback": True, "tool_parser": "auto"}
    for name, protocol in (("robust", every), ("paper", None)):
        with Endpoint(script) as server:
            run_model(cfg(server.url, protocol, name=name, retries=3), bench.system("marta"),
                      [bench.case(i) for i in IDS], tmp_path / "runs" / name / "marta.jsonl",
                      progress_stream=open("/dev/null", "w"))
    table = options_table(bench, tmp_path / "runs", ["robust", "paper"]).set_index("model")
    robust, paper = table.loc["robust"], table.loc["paper"]
    assert robust["options"] == "argument_feedback, retry, tool_parser=auto" and paper["options"] == "paper"
    assert (robust["retry_cases"], robust["tool_parser_cases"], robust["argument_feedback_cases"],
            robust["changed_cases"]) == (1, 1, 0, 2)
    assert paper["changed_cases"] == 0 and paper["tier1_paper_protocol"] == paper["tier1"]
    assert robust["tier1_paper_protocol"] == paper["tier1"] != robust["tier1"]
    assert robust["tier1_without_argument_feedback"] == robust["tier1"]


def _user(bench, case_id: str) -> str:
    from metrobench.agents.prompts import user_turns

    return user_turns(bench.case(case_id).raw)[0]

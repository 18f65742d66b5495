"""Any reply, no traceback: HTTP 200 bodies of every shape against a real 127.0.0.1 endpoint.

A well-formed JSON 200 of the wrong shape is a recorded, retryable endpoint
failure (the case is redone by a rerun); content given as a list of text parts
(Mistral's reasoning models) is content; a lone surrogate anywhere in a reply
is recorded as U+FFFD, and neither the run, a rerun nor scoring crashes on it.
"""

from __future__ import annotations

import copy
import json

import pytest

from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.run import run_model
from metrobench.scoring.scorer import Scorer
from metrobench.transcripts.records import CaseRecord, TranscriptWriter, read_run
from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call

IDS = ["MARTA-A-001", "MARTA-A-002"]
DECLINED = '{"outcome": "request_declined"}'


def cfg(url: str, **kw) -> ModelConfig:
    base = {"name": "fake", "provider": "llama_cpp", "base_url": f"{url}/v1", "retries": 2,
            "backoff_s": 0.01, "concurrency": 1}
    return ModelConfig(**{**base, **kw})


def run(bench, config, ids, out):
    return run_model(config, bench.system("marta"), [bench.case(i) for i in ids], out,
                     progress_stream=open("/dev/null", "w"))


def reshaped(change) -> dict:
    payload = chat_payload(DECLINED, [tool_call("line_info", {"line": "red"})])
    change(payload)
    return payload


def message(payload: dict) -> dict:
    return payload["choices"][0]["message"]


WRONG_SHAPES = {
    "tool_calls an object": lambda p: message(p).update(tool_calls=message(p)["tool_calls"][0]),
    "tool_calls a list of strings": lambda p: message(p).update(tool_calls=["line_info", "route_planner"]),
    "tool_calls a string": lambda p: message(p).update(tool_calls="line_info"),
    "function a string": lambda p: message(p)["tool_calls"][0].update(function="line_info"),
    "function name a number": lambda p: message(p)["tool_calls"][0]["function"].update(name=7),
    "arguments a number": lambda p: message(p)["tool_calls"][0]["function"].update(arguments=12),
    "call id a list": lambda p: message(p)["tool_calls"][0].update(id=["x"]),
    "content a number": lambda p: message(p).update(content=42, tool_calls=None),
    "content an object": lambda p: message(p).update(content={"text": "hi"}, tool_calls=None),
    "content part a number": lambda p: message(p).update(content=[{"type": "text", "text": "a"}, 3]),
    "content part text a number": lambda p: message(p).update(content=[{"type": "text", "text": 3}]),
    "reasoning a number": lambda p: message(p).update(reasoning_content=1.5),
    "prompt_tokens a string": lambda p: p["usage"].update(prompt_tokens="100"),
    "completion_tokens a string": lambda p: p["usage"].update(completion_tokens="20"),
    "completion_tokens a fraction": lambda p: p["usage"].update(completion_tokens=2.5),
    "completion_tokens a boolean": lambda p: p["usage"].update(completion_tokens=True),
    "cached_tokens a string": lambda p: p["usage"].update(prompt_tokens_details={"cached_tokens": "5"}),
    "usage a list": lambda p: p.update(usage=[100, 20]),
    "finish_reason a number": lambda p: p["choices"][0].update(finish_reason=1),
    "message a string": lambda p: p["choices"][0].update(message="hello"),
    "choices an object": lambda p: p.update(choices={"0": p["choices"][0]}),
}


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_wrong_shape_ends_its_case_as_a_scored_malformed_reply_never_a_crash(bench, tmp_path, shape):
    bad = reshaped(WRONG_SHAPES[shape])
    with FakeOpenAI(lambda r: bad) as api:  # with the retry option: retried once (retries=2), then ended
        summary = run(bench, cfg(api.url, protocol={"retry": True}), IDS[1:], tmp_path / "r.jsonl")
        assert len(api.requests) == 2 * len(IDS[1:])
    records = {r.case_id: r for r in read_run(tmp_path / "r.jsonl").records}
    record = records[IDS[1]]
    assert record.error.startswith("malformed reply: "), record.error
    assert (record.meta["ending"], record.meta["ending_kind"], record.meta["retryable"]) == \
        ("malformed", "model", False)
    assert summary.problem() is None and summary.stopped is None
    with FakeOpenAI(lambda r: bad) as api:  # the paper's protocol: one request a case, the same ending
        run(bench, cfg(api.url), IDS[1:2], tmp_path / "p.jsonl")
        assert len(api.requests) == 1
    [record] = read_run(tmp_path / "p.jsonl").records
    assert record.error.startswith("malformed reply: ") and record.meta["ending"] == "malformed"


RESPONSES_SHAPES = {
    "output items strings": {"output": ["hello"]},
    "output_text part a number": {"output": [{"type": "message", "content": [
        {"type": "output_text", "text": 5}]}]},
    "function_call name a list": {"output": [{"type": "function_call", "call_id": "c", "name": ["x"],
                                              "arguments": "{}"}]},
    "input_tokens a string": {"output": [], "usage": {"input_tokens": "9", "output_tokens": 1}},
    "output an object": {"output": {"type": "message"}},
}


@pytest.mark.parametrize("shape", sorted(RESPONSES_SHAPES))
def test_a_wrong_responses_shape_ends_its_case_as_a_scored_malformed_reply(bench, tmp_path, monkeypatch, shape):
    monkeypatch.setenv("FAKE_KEY", "k")
    body = {"id": "resp", "object": "response", "created_at": 0, "model": "m", "status": "completed",
            **RESPONSES_SHAPES[shape]}
    with FakeOpenAI(lambda r: body) as api:
        url = f"{api.url}/openai/deployments/d/?api-version=2025-04-01-preview"
        summary = run(bench, cfg(api.url, provider="azure_responses", api_key_env="FAKE_KEY", base_url=url,
                                 protocol={"retry": True}), IDS[:1], tmp_path / "t.jsonl")
        assert len(api.requests) == 2
    [record] = read_run(tmp_path / "t.jsonl").records
    assert record.error.startswith("malformed reply: ") and record.meta["retryable"] is False
    assert summary.endings["malformed"] == 1 and summary.problem() is None


TEXT_PARTS = {
    "one text part": ([{"type": "text", "text": DECLINED}], DECLINED, ""),
    "text split over parts": (['{"outcome": ', {"type": "text", "text": '"request_declined"}'}], DECLINED, ""),
    "mistral thinking then text": ([{"type": "thinking", "thinking": [{"type": "text", "text": "plan: "},
                                                                       {"type": "text", "text": "decline"}]},
                                    {"type": "text", "text": DECLINED}], DECLINED, "plan: decline"),
    "a reference part without text": ([{"type": "reference", "reference_ids": [1]},
                                       {"type": "text", "text": DECLINED}], DECLINED, ""),
    "an empty list": ([], "", ""),
}


@pytest.mark.parametrize("shape", sorted(TEXT_PARTS))
def test_content_parts_that_carry_text_are_the_content(bench, tmp_path, shape):
    parts, content, reasoning = TEXT_PARTS[shape]
    payload = chat_payload(None)
    message(payload)["content"] = parts
    with FakeOpenAI(lambda r: copy.deepcopy(payload)) as api:
        summary = run(bench, cfg(api.url), IDS[:1], tmp_path / "t.jsonl")
    [record] = read_run(tmp_path / "t.jsonl").records
    if content:
        assert record.error is None and record.raw_content == content and summary.problem() is None
        assert record.response == {"outcome": "request_declined"}
        assert record.reasoning_content == reasoning and record.messages[-1]["content"] == content
        assert record.meta["ending"] == "answered"
    else:  # no text at all: an empty reply, the model's ending (empty replies), as with content ""
        assert record.error.startswith("empty-response retry exhausted") and record.meta["ending_kind"] == "model"


def test_text_parts_next_to_tool_calls_go_back_to_the_endpoint_as_text(bench, tmp_path):
    replies = iter([chat_payload(None, [tool_call("line_info", {"line": "red"})]), chat_payload(DECLINED)])

    def script(request):
        payload = next(replies)
        if payload["choices"][0]["message"].get("tool_calls"):
            payload["choices"][0]["message"]["content"] = [{"type": "text", "text": "checking"}]
        return payload

    with FakeOpenAI(script) as api:
        run(bench, cfg(api.url), IDS[:1], tmp_path / "t.jsonl")
        sent = api.requests[1]["body"]["messages"][2]
    assert sent["content"] == "checking" and sent["tool_calls"][0]["function"]["name"] == "line_info"
    [record] = read_run(tmp_path / "t.jsonl").records
    assert record.error is None and record.tool_calls_made[0]["error"] is None


# lone surrogates: recorded as U+FFFD; the run, a rerun and scoring all go through

SUBMIT = {"outcome": "request_declined", "assistant_message": "Sorry \ud800 not here",
          "kiosk_action": {"action": "block_purchase", "reason_code": "invalid_request"}}

SURROGATES = {
    "in a plain answer": lambda r: chat_payload('{"outcome": "request_declined", "note": "\ud800"}'),
    "in the reasoning": lambda r: chat_payload(DECLINED, reasoning="think \udfff"),
    "in tool-call arguments": lambda r: chat_payload("", [tool_call("submit_assistant_state", SUBMIT)]),
    "in a raw argument string": lambda r: chat_payload("", [tool_call(
        "submit_assistant_state", json.dumps(SUBMIT)[:-1] + ', "x\ud83d": 1}')]),
    "in a tool name": lambda r: (chat_payload("", [tool_call("line_info\udc00", {"line": "red"})])
                                 if len(r["body"]["messages"]) == 2 else chat_payload(DECLINED)),
}


def surrogates(value) -> list[str]:
    """The strings (keys included) anywhere in ``value`` that hold a lone surrogate."""
    if isinstance(value, str):
        return [value] if any("\ud800" <= c <= "\udfff" for c in value) else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in surrogates(k) + surrogates(v)]
    if isinstance(value, list):
        return [s for v in value for s in surrogates(v)]
    return []


@pytest.mark.parametrize("where", sorted(SURROGATES))
def test_a_lone_surrogate_is_recorded_as_the_replacement_character(bench, tmp_path, where):
    out = tmp_path / "t.jsonl"
    with FakeOpenAI(SURROGATES[where]) as api:
        assert b"\\ud" in json.dumps(SURROGATES[where]({"body": {"messages": [0, 0]}})).encode()  # on the wire
        summary = run(bench, cfg(api.url), IDS[:1], out)
        for request in api.requests[1:]:  # what goes back to the endpoint holds no surrogate either
            assert not surrogates(request["body"])
    assert summary.ran == 1 and summary.problem() is None
    text = out.read_bytes().decode("utf-8")  # strict UTF-8
    # U+FFFD where the model wrote the surrogate (its verbatim argument string keeps the escape text)
    header, record_line = text.splitlines()   # the run's header, then its one record
    assert "\ufffd" in record_line and not surrogates(json.loads(record_line)) and not surrogates(json.loads(header))
    [record] = read_run(out).records
    assert record.error is None or not record.meta["retryable"]
    with FakeOpenAI(SURROGATES[where]) as api:  # a rerun: the case is done, nothing crashes
        again = run(bench, cfg(api.url), IDS[:1], out)
        assert (again.ran, again.skipped, len(api.requests)) == (0, 1, 0)
    scores = Scorer(bench.system("marta")).score([bench.case(IDS[0]).raw], [record])
    assert [s.case_id for s in scores] == IDS[:1]


def test_the_transcript_writer_records_a_lone_surrogate_from_any_writer(tmp_path):
    """The rule agent and the runner share the writer: a surrogate can reach it from any record."""
    out = tmp_path / "t.jsonl"
    record = CaseRecord("MARTA-A-001", "m", "marta", raw_content="a\ud800b",
                        tool_calls_made=[{"name": "x", "arguments": {"k\udbff": "v"}, "result": None, "error": None}],
                        meta={"note": ["\udc00"]})
    with TranscriptWriter(out) as writer:
        writer.write(record)
        writer.write(CaseRecord("MARTA-A-002", "m", "marta", raw_content="fine \U0001F600"))
    first, second = read_run(out).records
    assert first.raw_content == "a\ufffdb" and first.tool_calls_made[0]["arguments"] == {"k\ufffd": "v"}
    assert first.meta["note"] == ["\ufffd"] and second.raw_content == "fine \U0001F600"  # real pairs kept

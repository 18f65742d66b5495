"""Tool calls written as <tool_call> blocks: the parser on real strings, the setting, and the loop."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from test_runner import cfg, good_agent, run, score_records

from metrobench.errors import MetrobenchError
from metrobench.agents.prompts import prompt_digest
from metrobench.agents.runner.replies import ChatReply
from metrobench.agents.runner.protocol import Protocol
from metrobench.agents.runner.config import ModelConfig, parse_model_config
from metrobench.agents.runner.loop import run_case
from metrobench.agents.runner.tool_parsing import apply_tool_parser, parse_text_tool_calls
from metrobench.transcripts.records import read_run
from metrobench.standins.openai_api import FakeOpenAI


def calls_of(text: str) -> list[tuple[str, dict | str, str | None]]:
    """(name, arguments decoded where they decode, error) per block."""
    out = []
    for c in parse_text_tool_calls(text).calls:
        raw = c.call["function"]["arguments"]
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = raw
        out.append((c.call["function"]["name"], arguments, c.error))
    return out


def block(name: str, arguments, *, close: bool = True) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n" + ("</tool_call>" if close else "")


# --- the parser on strings ---------------------------------------------------------------

def test_a_single_block_becomes_an_openai_shaped_call():
    text = ('<tool_call>\n{"name": "route_planner", "arguments": {"origin": "Buckhead", '
            '"destination": "Decatur"}}\n</tool_call>')
    parsed = parse_text_tool_calls(text)
    assert parsed.content == ""
    [call] = parsed.calls
    assert call.error is None
    assert call.call == {"id": "call_text_1", "type": "function",
                         "function": {"name": "route_planner",
                                      "arguments": '{"origin": "Buckhead", "destination": "Decatur"}'}}


def test_several_blocks_with_prose_before_between_and_after():
    text = ("Let me look that up.\n"
            + block("route_planner", {"origin": "Airport", "destination": "Five Points"})
            + "\nand the fare:\n"
            + block("fare_calculator", {"route_id": "R1", "passengers": {"adults": 2, "children": 1}})
            + "\nOne moment please.")
    parsed = parse_text_tool_calls(text, first_index=4)
    assert parsed.content == "Let me look that up.\n\nand the fare:\n\nOne moment please."
    assert [c.id for c in parsed.calls] == ["call_text_4", "call_text_5"]
    assert calls_of(text) == [
        ("route_planner", {"origin": "Airport", "destination": "Five Points"}, None),
        ("fare_calculator", {"route_id": "R1", "passengers": {"adults": 2, "children": 1}}, None)]


def test_arguments_as_a_json_string_or_missing():
    text = ('<tool_call>{"name": "line_info", "arguments": "{\\"line\\": \\"red\\"}"}</tool_call>'
            '<tool_call>{"name": "disruption_feed"}</tool_call>')
    assert calls_of(text) == [("line_info", {"line": "red"}, None), ("disruption_feed", {}, None)]
    # a string that is not JSON is passed on: the loop's argument check answers it
    [(name, arguments, error)] = calls_of('<tool_call>{"name": "line_info", "arguments": "red"}</tool_call>')
    assert (name, arguments, error) == ("line_info", "red", None)


def test_nested_braces_and_braces_quotes_and_tags_inside_strings():
    arguments = {"origin": "Peachtree {Center}", "note": 'say "}" then </tool_call> {"x": 1}',
                 "passengers": {"adults": 1, "extra": {"deep": [{"a": {}}]}}}
    text = "ok " + block("route_planner", arguments) + " done"
    parsed = parse_text_tool_calls(text)
    assert parsed.content == "ok  done"
    assert calls_of(text) == [("route_planner", arguments, None)]


def test_a_last_block_without_its_closing_tag():
    text = (block("route_planner", {"origin": "Buckhead"})
            + "\n" + block("station_info", {"station": "Decatur"}, close=False))
    assert calls_of(text) == [("route_planner", {"origin": "Buckhead"}, None),
                              ("station_info", {"station": "Decatur"}, None)]
    # an unclosed block followed by the next one, and prose after an unclosed last block
    text = ('<tool_call>{"name": "line_info", "arguments": {"line": "red"}}\n'
            '<tool_call>{"name": "line_info", "arguments": {"line": "blue"}}  thanks')
    parsed = parse_text_tool_calls(text)
    assert [json.loads(c.call["function"]["arguments"]) for c in parsed.calls] == [{"line": "red"},
                                                                                  {"line": "blue"}]
    assert parsed.content == "thanks"


def test_broken_blocks_become_calls_that_carry_their_error():
    text = ('Checking.<tool_call>{"name": "route_planner", "arguments": {"origin": "Buckhead",}}</tool_call>'
            '<tool_call>{"arguments": {"line": "red"}}</tool_call>'
            '<tool_call>route_planner(origin="Buckhead")</tool_call>'
            '<tool_call>{"name": "line_info", "arguments": {}}}</tool_call>'
            '<tool_call>["line_info"]</tool_call>'
            '<tool_call>{"name": "fare_calculator", "arguments": {"route_id": "R')
    parsed = parse_text_tool_calls(text)
    assert parsed.content == "Checking."
    names = [c.call["function"]["name"] for c in parsed.calls]
    errors = [c.error for c in parsed.calls]
    # the name is kept where it can be read, so the record says which tool was meant
    assert names == ["route_planner", "", "", "line_info", "", "fare_calculator"]
    assert errors[0].startswith("tool call block is not valid JSON (Expecting property name")
    assert errors[1].startswith("tool call block has no tool name")
    assert errors[2].startswith("tool call block is not valid JSON (it does not start with '{')")
    assert errors[3].startswith("tool call block has text after its JSON object ('}')")
    assert errors[4].startswith("tool call block is not valid JSON (it does not start with '{')")
    assert "Unterminated string" in errors[5] and "not closed with </tool_call>" in errors[5]
    # a broken block's text travels as its arguments (recorded as written)
    assert parsed.calls[0].call["function"]["arguments"] == \
        '{"name": "route_planner", "arguments": {"origin": "Buckhead",}}'
    assert [c.id for c in parsed.calls] == [f"call_text_{i}" for i in range(1, 7)]


def test_a_tool_call_tag_mentioned_in_prose_is_not_a_call():
    text = "I answer with a <tool_call> tag when I need a tool, but not now."
    assert parse_text_tool_calls(text).calls == []
    assert parse_text_tool_calls(text).content == text
    mixed = "Write <tool_call> like this:\n" + block("line_info", {"line": "gold"})
    parsed = parse_text_tool_calls(mixed)
    assert parsed.content == "Write <tool_call> like this:"
    assert calls_of(mixed) == [("line_info", {"line": "gold"}, None)]


def test_unicode_in_prose_and_arguments():
    arguments = {"origin": "Hamad Int'l — مطار حمد", "destination": "台北車站", "note": "café ☕"}
    text = "Un momento… " + block("route_planner", arguments) + " 谢谢"
    parsed = parse_text_tool_calls(text)
    assert parsed.content == "Un momento…  谢谢"
    assert "台北車站" in parsed.calls[0].call["function"]["arguments"]  # not \\u-escaped
    assert calls_of(text) == [("route_planner", arguments, None)]


def test_apply_tool_parser_per_mode():
    text = "Sure. " + block("line_info", {"line": "red"})
    plain = {"role": "assistant", "content": text, "reasoning_content": "think"}
    message, text_calls = apply_tool_parser(plain, "auto")
    assert message["content"] == "Sure." and message["reasoning_content"] == "think"
    assert message["tool_calls"] == [c.call for c in text_calls] and len(text_calls) == 1
    assert plain["content"] == text and "tool_calls" not in plain  # the reply itself is untouched
    assert apply_tool_parser(plain, "hermes")[0] == message
    assert apply_tool_parser(plain, "none") == (plain, [])
    assert apply_tool_parser({"role": "assistant", "content": "no calls"}, "auto")[1] == []

    structured = {"id": "call_abc", "type": "function",
                  "function": {"name": "route_planner", "arguments": "{}"}}
    both = {"role": "assistant", "content": text, "tool_calls": [structured]}
    assert apply_tool_parser(both, "auto") == (both, [])  # structured first: the text is prose
    message, text_calls = apply_tool_parser(both, "hermes")
    assert [c["id"] for c in message["tool_calls"]] == ["call_abc", "call_text_1"]
    assert message["content"] == "Sure."


# --- the setting -------------------------------------------------------------------------

#: The prompt as rendered (metrobench.agents.prompts.prompt_digest), pinned: an edit of the prompt changes every
#: fingerprint (and a transcript made before it refuses to resume), so it is made on purpose.
PROMPT_DIGEST = "de8445fa6c4ee865"
AUTO = {"tool_parser": "auto"}


def test_tool_parser_setting_is_validated_and_fingerprinted_as_part_of_the_protocol():
    assert ModelConfig(name="m").protocol.tool_parser == "none"  # the paper's protocol
    assert parse_model_config({"name": "m", "protocol": {"tool_parser": "hermes"}}).protocol.tool_parser == "hermes"
    expected = "field protocol.tool_parser: Input should be 'auto', 'hermes' or 'none'"
    with pytest.raises(MetrobenchError, match=expected):
        parse_model_config({"name": "m", "protocol": {"tool_parser": "qwen"}}, "m.yaml")
    # the fingerprint of the settings (the protocol among them) and the prompt
    assert prompt_digest() == PROMPT_DIGEST, "the prompt changed, so every fingerprint did: update the pins"
    plain = ModelConfig(name="m")
    shaping = json.dumps({"name": "m", **plain.settings(), "prompt": PROMPT_DIGEST}, sort_keys=True)
    assert plain.fingerprint() == hashlib.sha256(shaping.encode()).hexdigest()[:16] == "ecb167c3025aa52b"
    assert ModelConfig(name="smollm", serving={"gguf": "/x/a.gguf"}).fingerprint() == "1ae14a71cc4c881f"  # + slot_ctx
    prints = {ModelConfig(name="m", protocol={"tool_parser": p}).fingerprint() for p in ("auto", "hermes", "none")}
    assert len(prints) == 3


# --- the loop ----------------------------------------------------------------------------

def as_text(payload: dict) -> dict:
    """A chat payload whose structured tool calls are rewritten as <tool_call> blocks in the text."""
    message = payload["choices"][0]["message"]
    calls = message.pop("tool_calls", None) or []
    blocks = [block(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    message["content"] = "\n".join([message.get("content") or "", *blocks]).strip()
    payload["choices"][0]["finish_reason"] = "stop"
    return payload


def test_a_full_case_called_through_text_blocks(bench, tmp_path):
    with FakeOpenAI(lambda request: as_text(good_agent(request))) as api:
        summary = run(bench, cfg(api.url, protocol=AUTO), ["MARTA-A-001"], tmp_path / "t.jsonl")
    assert (summary.ran, summary.failed) == (1, 0)
    [record] = read_run(tmp_path / "t.jsonl").records
    assert record.error is None and record.api_rounds == 4
    made = record.tool_calls_made
    assert [c["name"] for c in made] == ["route_planner", "fare_calculator",
                                         "submit_assistant_state", "submit_assistant_state"]
    assert all(c["parsed_from_text"] is True for c in made)
    route = made[0]["result"]  # the real planner's answer on the real network
    assert made[0]["error"] is None and route["route_id"] and len(route["stops"]) > 1
    assert made[1]["result"]["total"] > 0
    assert made[2]["error"] == '{"detail":"Invalid outcome: bogus"}'  # the 422 goes back, as ever
    assert record.response["outcome"] == "route_and_fare_ready"  # the accepted submit ended the case
    assistant = [m for m in record.messages if m["role"] == "assistant"]
    assert [m["tool_calls"][0]["id"] for m in assistant] == [f"call_text_{i}" for i in range(1, 5)]
    assert all(m["content"] == "" for m in assistant)  # each call once, as a call, not also as text
    tool_ids = [m["tool_call_id"] for m in record.messages if m["role"] == "tool"]
    assert tool_ids == [f"call_text_{i}" for i in range(1, 5)]
    verbatim = record.meta["text_tool_replies"]
    assert [r["round"] for r in verbatim] == [1, 2, 3, 4]
    assert verbatim[0]["content"].startswith('<tool_call>\n{"name": "route_planner"')
    assert record.meta["config"] == cfg("http://127.0.0.1:9/v1", protocol=AUTO).fingerprint()
    assert score_records(bench, tmp_path / "t.jsonl")["MARTA-A-001"].tier1_pct == 100.0


def test_tool_parser_none_leaves_a_text_block_as_a_plain_text_answer(bench, tmp_path):
    with FakeOpenAI(lambda request: as_text(good_agent(request))) as api:  # the default: the paper's
        run(bench, cfg(api.url), ["MARTA-A-001"], tmp_path / "n.jsonl")
    [record] = read_run(tmp_path / "n.jsonl").records
    assert record.api_rounds == 1 and record.error is None
    assert record.tool_calls_made == [] and record.response is None
    assert record.raw_content.startswith("<tool_call>") and "text_tool_replies" not in record.meta
    assert record.meta["config"] != cfg("http://127.0.0.1:9/v1", protocol=AUTO).fingerprint()


class ScriptedClient:
    """Stands in for ChatClient: answers each request with the next scripted assistant text."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    async def complete(self, messages, tools) -> ChatReply:
        self.seen.append(json.loads(json.dumps(messages)))
        return ChatReply({"role": "assistant", "content": self.replies.pop(0)}, "stop", 100, 20)


def test_a_broken_block_is_fed_back_as_a_tool_error_and_the_loop_goes_on(bench):
    case = bench.case("MARTA-A-001")
    broken = ('I will plan the trip.\n<tool_call>\n'
              '{"name": "route_planner", "arguments": {"origin": }\n</tool_call>')
    fixed = ("Sorry, again:\n" + block("route_planner", {"origin": "Airport", "destination": "Five Points"})
             + "\n" + block("line_info", {"line": "red"}))
    decline = block("submit_assistant_state", {
        "outcome": "request_declined", "assistant_message": "Please ask an agent.",
        "kiosk_action": {"action": "block_purchase", "reason_code": "invalid_request"}}, close=False)
    client = ScriptedClient([broken, fixed, decline])
    record = asyncio.run(run_case(client, bench.system("marta"), case, model="fake", max_rounds=5,
                                  protocol=Protocol(tool_parser="auto")))
    assert record.error is None and record.api_rounds == 3 and client.replies == []
    bad, planned, line, submit = record.tool_calls_made
    assert bad["name"] == "route_planner" and bad["result"] is None and bad["parsed_from_text"]
    assert bad["error"].startswith("tool call block is not valid JSON (Expecting value")
    assert bad["arguments"] == '{"name": "route_planner", "arguments": {"origin": }'
    # the model saw its error as the tool's answer, and the prose as its own words; the
    # unreadable call is carried on with {} (a template-rendering server refuses invalid JSON)
    second = client.seen[1]
    assert second[2] == {"role": "assistant", "content": "I will plan the trip.",
                         "tool_calls": [{"id": "call_text_1", "type": "function",
                                         "function": {"name": "route_planner", "arguments": "{}"}}]}
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_text_1"
    assert json.loads(second[3]["content"]) == {"error": bad["error"]}
    assert planned["error"] is None and line["error"] is None
    assert planned["result"]["stops"][-1]["station_name"] == "Five Points"
    assert [m["tool_call_id"] for m in client.seen[2] if m["role"] == "tool"][1:] == ["call_text_2",
                                                                                   "call_text_3"]
    assert submit["result"]["accepted"] is True  # an unclosed last block still submits
    assert record.response["outcome"] == "request_declined"
    assert [r["round"] for r in record.meta["text_tool_replies"]] == [1, 2, 3]


def test_structured_calls_come_first_under_auto(bench):
    """A reply with structured calls is taken as it is; blocks in its text stay text."""
    case = bench.case("MARTA-A-001")
    text = block("line_info", {"line": "red"})

    class Both(ScriptedClient):
        async def complete(self, messages, tools) -> ChatReply:
            reply = await super().complete(messages, tools)
            if len(self.seen) == 1:
                reply.message["tool_calls"] = [{"id": "call_s", "type": "function",
                                                "function": {"name": "line_info",
                                                             "arguments": '{"line": "gold"}'}}]
            return reply

    for mode, names in (("auto", [("line_info", False)]),
                        ("hermes", [("line_info", False), ("line_info", True)])):
        client = Both([text, "Goodbye."])
        record = asyncio.run(run_case(client, bench.system("marta"), case, model="fake", max_rounds=3,
                                      protocol=Protocol(tool_parser=mode)))
        assert [(c["name"], c.get("parsed_from_text", False)) for c in record.tool_calls_made] == names
        assert record.raw_content == "Goodbye."

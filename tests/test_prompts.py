"""The system prompt's structure and facts, the user message formats, the tool schemas."""

from __future__ import annotations

import json
import re

from metrobench.agents.prompts import TOOLS, fare_rules, system_prompt, user_message

FULL_CONTEXT = {
    "temporal_context": {"current_time": "23:40", "day_of_week": "Friday", "notes": "Last trains at 00:30"},
    "active_disruptions": [{"id": "d1"}], "accessibility_mode": True,
    "policy_change": {"text": "Children ride free this weekend."}, "knowledge_query": True,
}


def headings(text: str) -> list[str]:
    return re.findall(r"^## (.*)$", text, re.M)


def test_sections_in_the_reference_order(bench):
    text = system_prompt(bench.system("doha"), FULL_CONTEXT)
    assert text.startswith("You are the ticket kiosk assistant of Qatar Rail (Qatar Railways Company).\n")
    assert headings(text) == ["System Information", "Cultural Notes", "Service Hours",
                              "Current Time & Service Hours", "Your Role", "Workflow",
                              "Reason Code Semantics", "Advisory Banners", "Rules", "Disruption Handling",
                              "Accessibility", "Policy Update", "Available Policies", "Knowledge Base"]
    assert "- Current time: 23:40\n- Day: Friday\n- Last trains at 00:30\n" in text
    assert "\n\nChildren ride free this weekend.\n\n" in text
    assert "- [doha-refund-001] Travel Card Refund Policy\n" in text
    plain = system_prompt(bench.system("doha"), {})
    assert headings(plain) == ["System Information", "Cultural Notes", "Service Hours", "Your Role",
                               "Workflow", "Reason Code Semantics", "Advisory Banners", "Rules",
                               "Available Policies"]


def test_fare_rules_are_the_reference_json(bench):
    beijing = system_prompt(bench.system("beijing"), {})
    line = next(l for l in beijing.splitlines() if l.startswith("- Fare rules: "))
    assert '"base_fare": "\\u00a53"' in line and "\u00a5" not in line  # ASCII-escaped, as the reference
    rules = json.loads(line[len("- Fare rules: "):])
    assert list(rules)[:5] == ["model", "base_fare", "currency", "format", "payment"]
    doha = fare_rules(bench.system("doha"))
    assert doha["base_fare"] == "QR2" and doha["gold_class"] == {"fare": "QR10", "card": "Gold Travel Card"}
    assert fare_rules(bench.system("marta"))["base_fare"] == "$2.5"
    assert "Call the card Breeze Card" in system_prompt(bench.system("marta"), {})


def test_user_message_lines():
    events = [
        {"type": "station_selected", "field": "origin", "value": "Airport"},
        {"type": "station_selected", "field": "destination", "value": "Five Points"},
        {"type": "passenger_count_changed", "adults": 1, "children": 0, "seniors": -1},
        {"type": "payment_method_selected", "method": "gold_travel_card"},
        {"type": "freetext_input", "text": "Is there an elevator?"},
        {"type": "disruption_update", "disruption": {"id": "x"}},
        {"type": "something_else"},
        {"type": "passenger_count_changed", "adults": 0},
    ]
    assert user_message(events) == ("Origin: Airport\nDestination: Five Points\nPassengers: 1 adults, -1 seniors\n"
                                    "Payment method: Gold Travel Card\nIs there an elevator?\n"
                                    "\u26a0 DISRUPTION ALERT: Service disruption in effect\nPassengers: ")


def test_tool_schemas():
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert list(by_name) == ["route_planner", "fare_calculator", "station_info", "line_info",
                             "disruption_feed", "knowledge_base", "submit_assistant_state"]
    assert by_name["route_planner"]["required"] == ["origin", "destination"]
    assert by_name["fare_calculator"]["required"] == ["route_id", "passengers"]
    assert "breeze_card" not in by_name["fare_calculator"]["properties"]["payment_method"]["enum"]
    submit = by_name["submit_assistant_state"]
    assert submit["properties"]["route"]["properties"]["estimated_minutes"] == {"type": "integer"}
    assert set(submit["properties"]["route"]["required"]) == {
        "origin", "destination", "stops", "transfers", "estimated_minutes", "distance_miles", "line_sequence"}
    assert by_name["knowledge_base"]["required"] == []
    segment = by_name["route_planner"]["properties"]["segment_closures"]["items"]
    assert (segment["minItems"], segment["maxItems"]) == (2, 2)


def test_the_prompt_digest_follows_the_rendered_text_not_the_data(bench, monkeypatch):
    """A run's fingerprint carries prompt_digest: any edit of what the model is told changes it."""
    from metrobench.agents import prompts
    from metrobench.agents.runner.config import ModelConfig

    before, fingerprint = prompts.prompt_digest(), ModelConfig(name="m").fingerprint()
    assert re.fullmatch(r"[0-9a-f]{16}", before)
    rendered = prompts.render_system_prompt(prompts._PLACEHOLDER_FACTS, prompts._PLACEHOLDER_CONTEXT)
    assert headings(rendered) == headings(system_prompt(bench.system("doha"), FULL_CONTEXT))  # every section
    edits = [("_KNOWLEDGE", prompts._KNOWLEDGE.replace("one knowledge_base call", "a knowledge_base call")),
             ("_RULES", prompts._RULES + "- Be brief\n"),
             ("TOOLS", [*prompts.TOOLS[:-1], {**prompts.TOOLS[-1], "type": "tool"}])]
    for name, edited in edits:
        with monkeypatch.context() as patch:
            patch.setattr(prompts, name, edited)
            prompts.prompt_digest.cache_clear()
            assert prompts.prompt_digest() != before, name
            assert ModelConfig(name="m").fingerprint() != fingerprint, name
        prompts.prompt_digest.cache_clear()
    assert prompts.prompt_digest() == before

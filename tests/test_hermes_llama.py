"""What llama-server makes of a tool call in each syntax under Qwen3.5's template (issue 39, item 3).

The paper's students were trained on the reference's JSON blocks (``<tool_call>\\n{"name": ...,
"arguments": ...}\\n</tool_call>``, :mod:`metrobench.training.hermes`) and served with Qwen3.5's
own template and the seven tools, as the ``paper`` recipes serve theirs. This records, on the
vendored llama-server, what the runner gets back for a JSON-block answer and for a native
``<function=...><parameter=...>`` one.

A fixed answer instead of a trained student: the answer is sent as a final assistant message,
which llama-server continues (its prefill) and parses together with what the model adds; a
logit bias on ``<|im_end|>`` makes the model's one token the end of the turn, so the reply is
the server's reading of exactly that answer. The model is the random tiny Qwen3.5 (students'
architecture, SmolLM2's tokenizer): what comes back is the server's parser, not the weights.
The request is the runner's own (:class:`ChatClient`: tools, thinking on, temperature 0).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from metrobench.agents.prompts import TOOLS
from metrobench.agents.runner.client import ChatClient
from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.tool_parsing import apply_tool_parser

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
QWEN3_5 = REPO / "metrobench" / "resources" / "chat-templates" / "qwen3.5.jinja"
JSON_CALL = ('<tool_call>\n{"name": "route_planner", "arguments": {"origin": "Airport", "destination": '
             '"Five Points"}}\n</tool_call>')
NATIVE_CALL = ("<tool_call>\n<function=route_planner>\n<parameter=origin>\nAirport\n</parameter>\n"
               "<parameter=destination>\nFive Points\n</parameter>\n</function>\n</tool_call>")
ARGUMENTS = {"origin": "Airport", "destination": "Five Points"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tiny Qwen3.5 as a GGUF, served by the vendored llama-server with Qwen3.5's template."""
    pytest.importorskip("transformers")
    pytest.importorskip("llama_cpp")
    from metrobench.agents.serving import ServerConfig, llama_server
    from metrobench.training.base import base_folder
    from metrobench.training.export import convert_to_gguf

    tmp = tmp_path_factory.mktemp("hermes-llama")
    mp = pytest.MonkeyPatch()
    mp.setenv("METROBENCH_CACHE", str(tmp / "cache"))
    gguf = convert_to_gguf(base_folder("tiny-qwen3.5"), tmp / "tiny-qwen3_5-f16.gguf")
    config = ServerConfig(model_path=gguf, alias="student", n_ctx=4096, n_threads=2, chat_template_file=QWEN3_5)
    with llama_server(config, log_path=tmp / "server.log") as url:
        end = httpx.post(url.removesuffix("/v1") + "/tokenize", timeout=60,
                         json={"content": "<|im_end|>", "parse_special": True}).json()["tokens"]
        assert len(end) == 1
        yield url, end[0]
    mp.undo()


def reply_to(server, answer: str, *, tools=TOOLS) -> tuple[dict, str]:
    """The server's reply (message, finish reason) when the assistant's answer is ``answer``."""
    url, end = server
    config = ModelConfig(name="student", base_url=url, max_tokens=1, thinking=True, retries=1,
                         extra_body={"logit_bias": [[end, 100]]})
    messages = [{"role": "system", "content": "You are the ticket kiosk of MARTA."},
                {"role": "user", "content": "Origin: Airport\nDestination: Five Points"},
                {"role": "assistant", "content": answer}]

    async def ask():
        client = ChatClient(config, base_url=url)
        try:
            return await client.complete(messages, tools)
        finally:
            await client.aclose()

    reply = asyncio.run(ask())
    return reply.message, reply.finish_reason


def test_a_native_call_is_parsed_into_tool_calls(server):
    message, finish = reply_to(server, NATIVE_CALL)
    assert finish == "tool_calls" and not message.get("content")
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "route_planner" and json.loads(call["function"]["arguments"]) == ARGUMENTS


def test_a_json_block_is_dropped_neither_a_call_nor_text(server):
    """With the tools in the request the JSON block vanishes: no tool_calls, and not in the content either.

    Qwen3.5's parser (``common/parsers/qwen3-coder.cpp``) reads the content up to ``<tool_call>``
    and then only ``<function=...>`` calls; what it cannot read is cut. Neither runner can
    recover the call from the text (it is not there): both take the reply as one without a
    call (spec §6.6: empty, it is retried as an empty round; with reasoning beside it, it is
    the final answer with a null response, or moves on to the next user turn).
    """
    message, finish = reply_to(server, JSON_CALL)
    assert finish == "stop" and not message.get("tool_calls") and message.get("content") == ""
    assert apply_tool_parser(message, "auto") == (message, [])
    message, finish = reply_to(server, "Let me plan the route.\n\n" + JSON_CALL)
    assert message.get("content") == "Let me plan the route.\n\n" and not message.get("tool_calls")
    # A native call that misses a required parameter is cut the same way.
    message, _ = reply_to(server, NATIVE_CALL.replace("<parameter=destination>\nFive Points\n</parameter>\n", ""))
    assert message.get("content") == "" and not message.get("tool_calls")


def test_without_tools_the_json_block_comes_back_as_text(server):
    """No tools in the request: no tool parsing, the block is the reply's text.

    The reference's runner never reads calls from text (spec §6.6: the text is the final
    answer, ``json.loads`` fails, response null); the project's runner does unless the model's
    ``tool_parser`` is ``none``.
    """
    message, finish = reply_to(server, JSON_CALL, tools=[])
    assert finish == "stop" and message.get("content") == JSON_CALL and not message.get("tool_calls")
    parsed, calls = apply_tool_parser(message, "auto")
    assert [c.call["function"]["name"] for c in calls] == ["route_planner"]
    assert json.loads(parsed["tool_calls"][0]["function"]["arguments"]) == ARGUMENTS
    assert apply_tool_parser(message, "none") == (message, [])        # the reference's reading

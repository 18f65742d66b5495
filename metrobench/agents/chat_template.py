"""The chat templates students are trained and served with, chosen by a recipe's ``template``.

* ``metrobench`` (the ``corrected`` and CPU recipes): the project's ChatML
  template, tools in the system turn. Tool calls are written as
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks and tool
  results come back as ``<tool_response>`` user turns; no thinking block.
* ``qwen3.5`` (the ``paper`` recipes): Qwen3.5's own template, vendored byte
  for byte in ``metrobench/resources/chat-templates/qwen3.5.jinja`` (provenance
  beside it): calls in its ``<function=...><parameter=...>`` format, reasoning
  in ``<think>`` blocks (kept only after the last user turn, as Qwen renders
  it), served with thinking on. It renders tool-call arguments from objects,
  so messages are given to it with their JSON arguments parsed, as
  llama-server does (:func:`render_messages`).

Each template has a serving text (the one the merged model and its GGUF carry)
and a training text with ``{% generation %}`` tags around exactly the
assistant turns (everything after ``<|im_start|>assistant\n``, up to and
including ``<|im_end|>``) for the assistant-only loss. The tags change no
rendered byte (``tests/test_templates.py`` checks both templates against
llama-server's own rendering).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from metrobench.errors import MetrobenchError

_TEMPLATE = """\
{%- set offset = 1 if messages and messages[0]['role'] == 'system' else 0 -%}
<|im_start|>system
{{ messages[0]['content'] if offset else '' }}
{%- if tools %}

# Tools
To use a tool, answer with one block per call:
<tool_call>
{"name": "<tool name>", "arguments": {<arguments as JSON>}}
</tool_call>
The tools you can call:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
{%- endif %}<|im_end|>
{% for message in messages[offset:] -%}
{%- if message['role'] == 'user' -%}
<|im_start|>user
{{ message['content'] }}<|im_end|>
{% elif message['role'] == 'assistant' -%}
<|im_start|>assistant
[[GEN]]{{ message['content'] or '' }}
{%- for call in message['tool_calls'] or [] %}
{%- if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}<tool_call>
{"name": "{{ call['function']['name'] }}", "arguments": {% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}}
</tool_call>
{%- endfor %}<|im_end|>[[/GEN]]{{ '\n' }}
{%- elif message['role'] == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message['content'] }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

#: For training: assistant turns wrapped in {% generation %} for the loss mask.
TRAIN_TEMPLATE = _TEMPLATE.replace("[[GEN]]", "{% generation %}").replace("[[/GEN]]", "{% endgeneration %}")
#: For serving: the same text without the tags.
INFERENCE_TEMPLATE = _TEMPLATE.replace("[[GEN]]", "").replace("[[/GEN]]", "")


METROBENCH = "metrobench"
QWEN3_5 = "qwen3.5"
#: The templates a recipe may name.
TEMPLATE_NAMES = (METROBENCH, QWEN3_5)

# Qwen3.5's assistant branch, and what the training variant puts in its place: the turn
# header stays outside the generation span, the rest of the turn (think block, content,
# calls, <|im_end|>) inside it; each piece must occur exactly once in the vendored file.
_QWEN_TRAINING_EDITS = (
    ("{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}",
     "{{- '<|im_start|>' + message.role + '\\n' }}"
     "{%- set turn_head = '<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content %}"),
    ("{{- '<|im_start|>' + message.role + '\\n' + content }}",
     "{{- '<|im_start|>' + message.role + '\\n' }}{%- set turn_head = content %}"),
    ("{%- endif %}\n        {%- if message.tool_calls and message.tool_calls is iterable",
     "{%- endif %}\n        {%- generation %}{{- turn_head }}\n"
     "        {%- if message.tool_calls and message.tool_calls is iterable"),
    ("{{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
     "{{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}\n    {%- elif message.role == \"tool\" %}"),
)


@dataclass(frozen=True)
class ChatTemplate:
    """One template: its serving and training texts, how it is served, how it takes arguments."""

    name: str
    serving: str            # what the merged model and its GGUF carry
    training: str           # the same text with {% generation %} tags around the assistant turns
    thinking: bool          # chat_template_kwargs.enable_thinking when a student is served
    object_arguments: bool  # tool-call arguments rendered from objects (parsed JSON), not JSON text


def qwen3_5_template() -> str:
    """Qwen3.5's own chat template, from the package's resources."""
    return resources.files("metrobench.resources").joinpath("chat-templates/qwen3.5.jinja").read_text(
        encoding="utf-8")


def _with_generation_tags(template: str, edits: tuple[tuple[str, str], ...]) -> str:
    for old, new in edits:
        if template.count(old) != 1:
            raise MetrobenchError(f"chat template: expected one {old[:60]!r}, found {template.count(old)}")
        template = template.replace(old, new)
    return template


@lru_cache(maxsize=None)
def chat_template(name: str) -> ChatTemplate:
    """The template a recipe names (:data:`TEMPLATE_NAMES`)."""
    if name == METROBENCH:
        return ChatTemplate(METROBENCH, INFERENCE_TEMPLATE, TRAIN_TEMPLATE, thinking=False, object_arguments=False)
    if name == QWEN3_5:
        serving = qwen3_5_template()
        return ChatTemplate(QWEN3_5, serving, _with_generation_tags(serving, _QWEN_TRAINING_EDITS),
                            thinking=True, object_arguments=True)
    raise MetrobenchError(f"unknown chat template {name!r} (known: {', '.join(TEMPLATE_NAMES)})")


def template_of(text: str | None) -> ChatTemplate | None:
    """The known template whose serving or training text ``text`` is, else ``None``."""
    for name in TEMPLATE_NAMES:
        template = chat_template(name)
        if text in (template.serving, template.training):
            return template
    return None


def served_template(text: str | None) -> str:
    """The serving text a merged model carries: that of the adapter's template, else the project's."""
    return (template_of(text) or chat_template(METROBENCH)).serving


def _parsed(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def render_messages(template: ChatTemplate, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the template is given them: for object-argument templates, arguments parsed.

    llama-server does the same with the JSON-string arguments of an OpenAI
    request before rendering such a template, so training and serving render
    one text.
    """
    if not template.object_arguments:
        return messages
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [
                {**call, "function": {**call["function"], "arguments": _parsed(call["function"].get("arguments"))}}
                for call in calls]}
        out.append(message)
    return out

"""The chat template students are trained and served with: ChatML turns, tools in the system turn.

Tool calls are written as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
blocks and tool results come back as ``<tool_response>`` user turns, the layout
Qwen-family models (the paper's students) were built with. Training uses the
variant with ``{% generation %}`` tags, which mark exactly the assistant turns
(text, tool calls and the closing ``<|im_end|>``) for the assistant-only loss;
the merged model is saved with the plain variant (llama.cpp's template engine
does not know the tag). Both render the same text.
"""

from __future__ import annotations

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

"""A case's conversation, turn by turn, with each tool call's arguments and answer.

With recorded messages (the runner's transcripts), the conversation is drawn
from them: the system prompt folded, each user turn, each assistant reply with
its calls; a call's answer comes from the matching ``tool_calls_made`` entry
(same order), else from the tool message with its id. Without messages (the
reference's result JSON; a rule-agent transcript from before the rule agent ran in
the runner's loop), the rebuilt prompt and user turns are
drawn, then the calls from ``tool_calls_made``. A call that failed is marked,
and a rejected ``submit_assistant_state`` is labelled as the 422 feedback the
model received.
"""

from __future__ import annotations

from typing import Any

from metrobench.transcripts.records import CaseRecord
from metrobench.viewer.html import esc, pretty
from metrobench.vocabulary import SUBMIT_TOOL



def render_call(name: Any, arguments: Any, entry: dict[str, Any] | None, fallback: Any = None) -> str:
    """One tool call: arguments, then the answer or the error fed back to the model."""
    error = entry.get("error") if entry else None
    parts = [f"<div class=\"call{' error' if error else ''}\"><div><b>tool call</b> "
             f"<code class=\"tool-name\">{esc(name)}</code>"
             f"{' <span class=note>(parsed from text)</span>' if entry and entry.get('parsed_from_text') else ''}"
             f"</div><div class=\"note\">arguments</div>{pretty(arguments)}"]
    if error:
        label = "422 feedback: submission rejected" if name == SUBMIT_TOOL else "error fed back to the model"
        parts.append(f"<div class=\"feedback\">{label}</div>{pretty(error)}")
    elif entry is not None:
        parts.append(f"<div class=\"note\">result</div>{pretty(entry.get('result'))}")
    elif fallback is not None:
        parts.append(f"<div class=\"note\">tool message</div>{pretty(fallback)}")
    parts.append("</div>")
    return "".join(parts)


def _message(role: str, body: str, turn: int | None = None) -> str:
    head = f"turn {turn}: user" if role == "user" and turn else role
    return f"<div class=\"msg {esc(role)}\"><div class=\"role\">{esc(head)}</div>{body}</div>"


def _system(content: Any, rebuilt: bool) -> str:
    note = " (rebuilt from the case: the run recorded no messages)" if rebuilt else ""
    return (f"<details class=\"msg system\"><summary class=\"role\">system prompt{note}</summary>"
            f"<pre>{esc(content)}</pre></details>")


def _assistant(message: dict[str, Any], entries: list[dict[str, Any]], position: int,
               tool_text: dict[str, Any]) -> tuple[str, int]:
    """An assistant reply and its calls; returns the html and the next tool_calls_made index."""
    body = []
    if message.get("reasoning_content"):
        body.append(f"<details><summary>reasoning</summary><pre>{esc(message['reasoning_content'])}</pre></details>")
    if message.get("content"):
        body.append(f"<pre class=\"content\">{esc(message['content'])}</pre>")
    for call in message.get("tool_calls") or []:
        call = call if isinstance(call, dict) else {}
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        entry = entries[position] if position < len(entries) else None
        position += 1
        body.append(render_call(function.get("name"), function.get("arguments"), entry,
                                tool_text.get(call.get("id"))))
    return _message("assistant", "".join(body) or "<p class=\"note\">(empty reply)</p>"), position


def messages_html(messages: list[Any], entries: list[dict[str, Any]], *, rebuilt: bool = False) -> str:
    """Recorded (or rebuilt) messages in order; tool messages are shown under their calls."""
    tool_text = {m.get("tool_call_id"): m.get("content") for m in messages
                 if isinstance(m, dict) and m.get("role") == "tool"}
    out, position, turn = [], 0, 0
    for message in messages:
        if not isinstance(message, dict):
            out.append(_message("unknown", pretty(message)))
            continue
        role = message.get("role")
        if role == "system":
            out.append(_system(message.get("content"), rebuilt))
        elif role == "user":
            turn += 1
            out.append(_message("user", f"<pre>{esc(message.get('content'))}</pre>", turn))
        elif role == "assistant":
            html, position = _assistant(message, entries, position, tool_text)
            out.append(html)
        elif role != "tool":
            out.append(_message(str(role), pretty(message.get("content"))))
    return "".join(out)


def render_conversation(record: CaseRecord | None, rebuilt: list[dict[str, Any]]) -> str:
    """The whole conversation of a case (what the model saw and did)."""
    if record is None:
        return "<p class=\"note\">No transcript record.</p>"
    entries = [e if isinstance(e, dict) else {"result": e} for e in record.tool_calls_made or []]
    if record.messages:
        return messages_html(record.messages, entries)
    out = [messages_html(rebuilt, [], rebuilt=True)] if rebuilt else []
    calls = "".join(render_call(e.get("name"), e.get("arguments"), e) for e in entries)
    out.append(_message("assistant", calls or "<p class=\"note\">(no tool calls)</p>"))
    if record.raw_content:
        out.append(_message("assistant", f"<div class=\"note\">final content</div>{pretty(record.raw_content)}"))
    return "".join(out)

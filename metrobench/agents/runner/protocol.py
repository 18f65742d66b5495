"""The protocol between the loop and a live endpoint: the paper's by default, our robustness opt-in.

The reference runner (spec §6.5-6.6, ``harness/runner.py``) ends a case on the first thing a
live endpoint answers that is not a usable reply, and the paper's tables are made of those
endings: the small students, Gemma E2B/E4B and Llama 3.1-8B lose exactly such cases. So by
default (:data:`PAPER`, every option off) a case ends as the reference ended it, recorded and
scored:

* an HTTP status after the reference's 429 retries (``retries`` attempts, the reference's 5,
  sleeping ``backoff_s`` doubled each time: 1, 2, 4, 8 s) — a 500, a 429 that never clears, a
  400 — ends the case with ``"<status>: <body[:500]>"`` (ending ``refused``);
* a round with no complete reply within ``timeout_s`` (240 s) ends it (``timeout``), the first
  request of a run included: a server that accepted the connection is live, and its silence is
  the case's, as in the reference, where every case of such a run errs on its own;
* an HTTP 200 that is not a reply (not JSON, no ``choices[0].message``) ends it (``malformed``);
* tool-call arguments that ``json.loads`` cannot read (broken JSON, ``""``, an object, none)
  and a call without ``id`` end it with the exception's text, as the reference's uncaught
  exception did (``arguments``); calls before it in the same reply have run;
* a reply whose text holds ``<tool_call>`` blocks is a plain-text answer (``tool_parser: none``);
* empty rounds (no calls, no text but whitespace, no reasoning) are retried, and the second
  empty round of a case ends it: the reference never resets its counter after a tool call.

**The one exception: an endpoint that is not there.** Connection refused or reset, a
connection not accepted within :data:`CONNECT_TIMEOUT_S`, and HTTP 401/403/404 (a refused key,
an unknown model or path) are the infrastructure's, never a case's ending: they are retried
(``retries`` attempts), the run fails, and a rerun redoes exactly those cases. The reference
would have scored every case of such a run as an error (238 errors for a server that was not
started), which says nothing about the model; an unattended study must stop and be rerun
instead. A server that never comes up (``metrobench bench`` waits until the server it started
answers ``/v1/models``) stops the job before any case is sent.

The options (:class:`Protocol`, a model config's ``protocol``) are our robustness, named and
recorded in the run's settings and fingerprint as the scorer's errata are; what each changed
is recorded per case (``meta.protocol``) and tabulated per row (``results/protocol_options.csv``):

* ``retry`` — 408, 5xx, time-outs and malformed replies are retried like 429
  (``retries`` attempts, backoff honouring ``retry-after``); what still fails ends the case
  as above (never an endless rerun).
* ``argument_feedback`` — unreadable arguments go back to the model as a tool error and the
  case goes on (the conversation carries ``{}`` in their place).
* ``tool_parser`` — ``auto`` runs ``<tool_call>`` blocks written in a reply's text as tool
  calls when the reply has no structured ones, ``hermes`` also next to structured ones
  (:mod:`metrobench.agents.runner.tool_parsing`); ``none`` (the paper's) never.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from metrobench.agents.runner.tool_parsing import ToolParser

#: Seconds a connection may take to be accepted: past it the endpoint is not there (infrastructure),
#: whatever ``timeout_s`` allows a reply.
CONNECT_TIMEOUT_S = 30.0

#: Option -> what it changes against the reference's protocol (documentation and the options table).
OPTIONS: dict[str, str] = {
    "retry": "408, 5xx, time-outs and malformed replies are retried like 429 before they end the case",
    "argument_feedback": "unreadable tool-call arguments go back to the model as a tool error instead of "
                         "ending the case",
    "tool_parser": "<tool_call> blocks written in a reply's text run as tool calls instead of ending the "
                   "case as a plain-text answer",
}


class Protocol(BaseModel):
    """How the loop meets what a live endpoint answers; every default is the paper's harness."""

    model_config = ConfigDict(extra="forbid")

    retry: bool = False
    argument_feedback: bool = False
    tool_parser: ToolParser = "none"

    @property
    def is_paper(self) -> bool:
        """Whether this is the reference's protocol (no option on)."""
        return self == PAPER

    def options(self) -> list[str]:
        """The options on, by name (``tool_parser=auto`` for a parser)."""
        names = [name for name in ("retry", "argument_feedback") if getattr(self, name)]
        if self.tool_parser != "none":
            names.append(f"tool_parser={self.tool_parser}")
        return names

    def recorded(self) -> dict[str, Any]:
        """The protocol as the run's settings state it."""
        return self.model_dump()


#: The paper's harness: no option on.
PAPER = Protocol()

"""Calling a tool by name with raw arguments, answering exactly as the reference server.

:func:`call_tool` is the single entry point used by the runner, the rule agent,
the ``metrobench tool`` replay command and the HTTP server, so all four give the
same status and body for the same call:

* 200 and the tool's JSON body;
* 422 ``{"detail": [...]}`` with pydantic's field errors (``loc`` prefixed with
  ``"body"``, no ``url`` key), as FastAPI renders a request that fails its model;
* 404/422 ``{"detail": "<message>"}`` for the tools' own checks;
* 500 ``Internal Server Error`` (plain text) where the reference crashed;
* for names that are not tools: 405 ``Method Not Allowed`` for the reference's
  GET-only demo pages, otherwise 404 ``Not Found`` — without reaching anything
  (the reference forwarded any name as a URL path; spec §13 #17).

``text`` is the body as the HTTP server sends it (compact JSON, non-ASCII kept),
which is what the reference runner recorded as a failed call's ``error``.

The tools are the vocabulary's (:data:`metrobench.vocabulary.TOOLS`), each the
function of that name in :mod:`~metrobench.kiosk.tools.functions`, validated
with the request model its second parameter is annotated with: one spelling of
each name and each model, so the table cannot drift from them.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

import metrobench.kiosk.tools.functions as functions
from metrobench import vocabulary
from metrobench.kiosk.tools.session import ToolSession

Implementation = Callable[[ToolSession, Any], dict[str, Any]]


def _tool(name: str) -> tuple[type[BaseModel], Implementation]:
    """(request model, implementation) of tool ``name``: the function and its annotated request."""
    implementation = getattr(functions, name)
    request = list(inspect.signature(implementation).parameters)[1]
    return typing.get_type_hints(implementation)[request], implementation


#: Tool name -> (request model, implementation), in the vocabulary's order.
TOOLS: dict[str, tuple[type[BaseModel], Implementation]] = {name: _tool(name) for name in vocabulary.TOOLS}

# Paths the reference server answered only to GET: POSTing to them gave 405.
_GET_ONLY = re.compile(r"^(health|verify|verify_data\.json|annotate|simulator|systems|stations/[^/]+)$")


def json_body(body: Any) -> str:
    """The body as FastAPI's JSONResponse renders it."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@dataclass(frozen=True)
class ToolResponse:
    """One tool answer: HTTP status, parsed body, and the body text as sent."""

    status: int
    body: Any
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def json(cls, status: int, body: Any) -> "ToolResponse":
        return cls(status, body, json_body(body))


def validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic errors in FastAPI's request-validation shape."""
    detail = []
    for err in exc.errors(include_url=False):
        item = {**err, "loc": ["body", *err["loc"]]}
        detail.append(json.loads(json.dumps(item, default=str)))
    return detail


def build_payload(session: ToolSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The request body the reference runner would send: arguments plus case id (and time)."""
    payload = dict(arguments)
    if session.case_id:
        payload["case_id"] = session.case_id
    if name == "disruption_feed" and session.current_time:
        payload["current_time"] = session.current_time
    return payload


def call_tool(session: ToolSession, name: str, arguments: dict[str, Any]) -> ToolResponse:
    """Run tool ``name`` with the model's ``arguments`` in ``session``."""
    if name not in TOOLS:
        if _GET_ONLY.match(name):
            return ToolResponse.json(405, {"detail": "Method Not Allowed"})
        return ToolResponse.json(404, {"detail": "Not Found"})
    model, implementation = TOOLS[name]
    payload = build_payload(session, name, arguments)
    try:
        request = model.model_validate(payload)
    except ValidationError as exc:
        return ToolResponse.json(422, {"detail": validation_detail(exc)})
    try:
        body = implementation(session, request)
    except functions.ToolError as exc:
        if exc.status >= 500:
            return ToolResponse(exc.status, exc.detail, exc.detail)
        return ToolResponse.json(exc.status, {"detail": exc.detail})
    return ToolResponse.json(200, body)

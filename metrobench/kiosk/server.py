"""The tools over HTTP, for agents that run outside this process.

``metrobench serve-tools --system S --port P`` serves ``POST /<tool>`` on
127.0.0.1 with the reference's request and response shapes. Every route goes
through :func:`metrobench.kiosk.tools.dispatch.call_tool`, so HTTP answers are byte-identical to
the in-process ones. State is per case: ``POST /set_disruptions`` with a
``case_id`` opens a session for that case (its disruptions, its own route cache);
calls carrying that ``case_id`` use it, calls without one use a default session.
Unlike the reference, names that are not tools never reach anything, and a
body the server cannot use (not JSON, nested too deeply to parse, not an
object, an unknown system or a non-list ``disruptions`` on ``set_disruptions``)
is answered 422 with a ``detail``, never a 500.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from metrobench.data.loader import Benchmark
from metrobench.data.root import SYSTEMS
from metrobench.errors import MetrobenchError
from metrobench.kiosk.sessions import DEFAULT_SESSION, SessionStore
from metrobench.kiosk.tools.dispatch import ToolResponse, call_tool, json_body

def _as_http(answer: ToolResponse) -> Response:
    if isinstance(answer.body, str) and answer.status >= 500:
        return PlainTextResponse(answer.text, status_code=answer.status)
    return Response(answer.text.encode("utf-8"), status_code=answer.status,
                    media_type="application/json")


class BadBody(Exception):
    """A request body the server cannot use; its message is the 422's ``detail``."""


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except RecursionError:
        raise BadBody("body is nested too deeply") from None
    except ValueError:  # not JSON, or not UTF-8
        raise BadBody("body must be JSON") from None
    if not isinstance(body, dict):
        raise BadBody("body must be a JSON object")
    return body


def _disruptions_request(payload: dict[str, Any]) -> dict[str, Any]:
    """The ``set_disruptions`` body checked: a known system, a string case id, a list."""
    system = payload.get("system")
    if system is not None and system != "" and system not in SYSTEMS:
        raise BadBody(f"unknown system {system!r}; use one of {', '.join(SYSTEMS)}")
    if not isinstance(payload.get("case_id", DEFAULT_SESSION), str):
        raise BadBody("case_id must be a string")
    if not isinstance(payload.get("disruptions", []), list):
        raise BadBody("disruptions must be a list")
    return payload


def create_app(bench: Benchmark, system: str) -> FastAPI:
    """The FastAPI application for one default system."""
    bench.system(system)  # fail at start-up, not on the first request
    store = SessionStore(bench, system)
    app = FastAPI(title="metrobench tools", docs_url=None, redoc_url=None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "system": system}

    @app.exception_handler(BadBody)
    async def bad_body(request: Request, exc: BadBody) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.post("/set_disruptions")
    async def set_disruptions(request: Request) -> Response:
        payload = _disruptions_request(await _json_object(request))
        store.set_disruptions(payload.get("case_id"), payload.get("system") or None,
                              payload.get("disruptions", []))
        return Response(json_body({"ok": True}), media_type="application/json")

    @app.post("/{name:path}")
    async def tool(name: str, request: Request) -> Response:
        arguments = await _json_object(request)
        case_id = arguments.get("case_id")
        session = store.get(case_id if isinstance(case_id, str) else None)
        return _as_http(call_tool(session, name, arguments))

    return app


def serve(bench: Benchmark, system: str, port: int, host: str = "127.0.0.1") -> None:
    """Run the server until interrupted (loopback only by default).

    The port is bound here first, so a port in use is one clear error instead of
    uvicorn's log line and exit status 3.
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener still refuses the port
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MetrobenchError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    server = uvicorn.Server(uvicorn.Config(create_app(bench, system), log_level="warning"))
    server.run(sockets=[sock])

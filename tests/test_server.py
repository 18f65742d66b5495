"""The HTTP server: a real uvicorn process on 127.0.0.1 answers as the in-process tools do."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(root):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "metrobench", "serve-tools", "--data", str(root),
                             "--system", "bart", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("tool server did not start: " + proc.stdout.read().decode())
    yield url
    proc.terminate()
    proc.wait(timeout=10)


CALLS = [
    ("route_planner", {"origin": "Embarcadero", "destination": "Daly City"}),
    ("route_planner", {"origin": "Nowhere", "destination": "Daly City"}),
    ("fare_calculator", {"route_id": "route_x", "passengers": {"adults": -2}}),
    ("station_info", {"station_ids": ["BART-EMBR", "Montgomery St"], "query_type": "connections"}),
    ("submit_assistant_state", {"outcome": "maybe", "kiosk_action": {"action": "x", "reason_code": "ok"},
                                "assistant_message": "m"}),
    ("submit_assistant_state", {"outcome": "advisory_only", "kiosk_action": {"action": "display_info", "reason_code": "ok"},
                                "assistant_message": "m", "route": {"origin": "a", "destination": "b", "stops": [{}],
                                "transfers": 0, "estimated_minutes": 1, "distance_miles": 1, "line_sequence": []}}),
    ("book_taxi", {}),
]


@pytest.mark.parametrize("name,args", CALLS)
def test_http_answers_equal_in_process_answers(server, bench, name, args):
    response = httpx.post(f"{server}/{name}", json=args, timeout=10)
    local = call_tool(ToolSession(bench.system("bart")), name, args)
    assert response.status_code == local.status
    assert response.text == local.text


def test_sessions_per_case_over_http(server):
    disruption = {"id": "d1", "line": "red", "segment": None, "type": "planned_maintenance",
                  "severity": "warning", "message": "Red line works"}
    ok = httpx.post(f"{server}/set_disruptions", json={"case_id": "C1", "disruptions": [disruption]})
    assert ok.json() == {"ok": True}
    mine = httpx.post(f"{server}/disruption_feed", json={"case_id": "C1"}).json()
    other = httpx.post(f"{server}/disruption_feed", json={"case_id": "C2"}).json()
    assert [d["id"] for d in mine["disruptions"]] == ["d1"] and other == {"disruptions": []}


DEEP = "[" * 10000 + "]" * 10000


@pytest.mark.parametrize("path,body,detail", [
    ("set_disruptions", b"{not json", "body must be JSON"),
    ("set_disruptions", b'{"case_id": "C9", "system": "atlantis", "disruptions": []}', "unknown system 'atlantis'"),
    ("set_disruptions", b'{"case_id": "C9", "disruptions": {"id": "d"}}', "disruptions must be a list"),
    ("set_disruptions", b'{"case_id": ["C9"], "disruptions": []}', "case_id must be a string"),
    ("set_disruptions", b"[1, 2]", "body must be a JSON object"),
    ("set_disruptions", ('{"case_id": "C9", "disruptions": ' + DEEP + "}").encode(), "nested too deeply"),
    ("route_planner", ('{"origin": ' + DEEP + "}").encode(), "nested too deeply"),
    ("route_planner", b"\xff\xfe", "body must be JSON"),
])
def test_unusable_bodies_are_422_not_500(server, path, body, detail):
    response = httpx.post(f"{server}/{path}", content=body, headers={"content-type": "application/json"},
                          timeout=10)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert httpx.get(f"{server}/health", timeout=5).status_code == 200  # and it keeps serving

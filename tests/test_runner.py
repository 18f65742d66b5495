"""The runner's loop, dialects, retries and resume, against a local server speaking the OpenAI formats."""

from __future__ import annotations

import json

import pytest

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.run import run_model
from metrobench.scoring.scorer import Scorer
from metrobench.transcripts.records import read_run
from metrobench.standins.json_server import DROP
from metrobench.standins.openai_api import FakeOpenAI, chat_payload, tool_call

RETRY = {"retry": True}


def cfg(url: str, **kw) -> ModelConfig:
    base = {"name": "fake", "provider": "llama_cpp", "base_url": f"{url}/v1", "retries": 3,
            "backoff_s": 0.01, "concurrency": 2}
    return ModelConfig(**{**base, **kw})


def last_tool(messages: list[dict]) -> dict | None:
    for message in reversed(messages):
        if message["role"] == "tool":
            return json.loads(message["content"])
        if message["role"] == "user":
            return None
    return None


def good_agent(request: dict):
    """Plans, prices, submits a bad state once, then the right one (per user turn)."""
    messages = request["body"]["messages"]
    user = [m for m in messages if m["role"] == "user"][-1]["content"]
    fields = dict(line.split(": ", 1) for line in user.splitlines() if ": " in line)
    since_user = messages[max(i for i, m in enumerate(messages) if m["role"] == "user"):]
    calls = [c for m in since_user if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    names = [c["function"]["name"] for c in calls]
    result = last_tool(messages)
    if "route_planner" not in names:
        return chat_payload(None, [tool_call("route_planner", {"origin": fields["Origin"],
                                                               "destination": fields["Destination"]})])
    route = next(json.loads(m["content"]) for m in since_user if m["role"] == "tool")
    if "fare_calculator" not in names:
        return chat_payload("", [tool_call("fare_calculator", {"route_id": route["route_id"],
                                                               "passengers": {"adults": 1}}, "call_2")])
    fare = result if "fare_id" in (result or {}) else next(
        json.loads(m["content"]) for m in since_user if m["role"] == "tool" and "fare_id" in m["content"])
    state = {
        "outcome": "route_and_fare_ready",
        "route": {"origin": fields["Origin"], "destination": fields["Destination"], "stops": route["stops"],
                  "transfers": route["transfers"], "estimated_minutes": int(route["estimated_minutes"]),
                  "distance_miles": route["distance_miles"], "line_sequence": route["line_sequence"]},
        "fare_quote": {"passenger_summary": {"adults": 1, "children": 0, "seniors": 0, "disabled": 0,
                                             "free_riders": 0},
                       "line_items": [{"rider_type": "adult", "count": 1, "unit_fare": fare["total"],
                                       "subtotal": fare["total"], "currency": fare["currency"]}],
                       "total": fare["total"], "currency": fare["currency"]},
        "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"},
        "assistant_message": f"Your fare is ${fare['total']}; tap your Breeze Card at the gate.",
    }
    if names.count("submit_assistant_state") == 0:
        return chat_payload("", [tool_call("submit_assistant_state", {**state, "outcome": "bogus"}, "c3")])
    return chat_payload("", [tool_call("submit_assistant_state", state, "c4")],
                        reasoning="all checked")


def run(bench, config, ids, out, **kw):
    cases = [bench.case(i) for i in ids]
    return run_model(config, bench.system("marta"), cases, out, progress_stream=open("/dev/null", "w"), **kw)


def score_records(bench, path):
    records = read_run(path).records
    cases = [bench.case(r.case_id).raw for r in records]
    scores = Scorer(bench.system("marta")).score(cases, records)
    return {s.case_id: s.totals("marta") for s in scores}


def test_a_full_case_with_a_rejected_then_accepted_submission(bench, tmp_path):
    with FakeOpenAI(good_agent) as api:
        summary = run(bench, cfg(api.url), ["MARTA-A-001"], tmp_path / "t.jsonl")
    assert (summary.ran, summary.failed) == (1, 0)
    [record] = read_run(tmp_path / "t.jsonl").records
    assert record.api_rounds == 4 and record.error is None
    assert [c["name"] for c in record.tool_calls_made] == ["route_planner", "fare_calculator",
                                                            "submit_assistant_state", "submit_assistant_state"]
    rejected = record.tool_calls_made[2]
    assert rejected["result"] is None and rejected["error"] == '{"detail":"Invalid outcome: bogus"}'
    tool_messages = [m for m in record.messages if m["role"] == "tool"]
    assert json.loads(tool_messages[2]["content"]) == {"error": '{"detail":"Invalid outcome: bogus"}'}
    assert record.response["outcome"] == "route_and_fare_ready"
    assert record.reasoning_content == "all checked"
    assert record.input_tokens == 400 and record.output_tokens == 80
    assert record.meta["config"] == cfg("http://x").fingerprint()  # the URL is not in it
    # assistant messages go back as the endpoint gave them (content null stays null, as the
    # reference sends it back; "" stays ""), with their extra fields
    second, third = (api.requests[i]["body"]["messages"] for i in (1, 2))
    assert second[2]["role"] == "assistant" and second[2]["content"] is None
    assert third[4]["role"] == "assistant" and third[4]["content"] == ""
    assert score_records(bench, tmp_path / "t.jsonl")["MARTA-A-001"].tier1_pct == 100.0


def test_request_body_per_dialect(bench, tmp_path):
    seen = []

    def script(request):
        seen.append(request)
        return chat_payload('{"outcome": "request_declined"}')

    with FakeOpenAI(script) as api:
        run(bench, cfg(api.url, thinking=False, top_k=20, min_p=0.0, top_p=0.95, temperature=1.0,
                       extra_body={"cache_prompt": True}), ["MARTA-A-001"], tmp_path / "a.jsonl")
    body = seen[0]["body"]
    assert body["max_tokens"] == 4096 and "max_completion_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["top_k"], body["min_p"], body["top_p"], body["temperature"]) == (20, 0.0, 0.95, 1.0)
    assert body["cache_prompt"] is True and "tool_choice" not in body  # the reference sends none
    assert [t["function"]["name"] for t in body["tools"]] == [
        "route_planner", "fare_calculator", "station_info", "line_info", "disruption_feed",
        "knowledge_base", "submit_assistant_state"]
    assert body["messages"][1] == {"role": "user", "content": "Origin: Airport\nDestination: Five Points\n"
                                                              "Passengers: 1 adults"}


def test_openai_and_azure_chat_requests(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-secret-value")
    with FakeOpenAI(lambda r: chat_payload("plain answer")) as api:
        run(bench, cfg(api.url, provider="openai", api_key_env="FAKE_KEY", reasoning_effort="xhigh",
                       model="gpt-5.4"), ["MARTA-A-001"], tmp_path / "o.jsonl")
        azure = f"{api.url}/openai/deployments/gpt-54/?api-version=2025-04-01-preview"
        run(bench, cfg(api.url, provider="azure", api_key_env="FAKE_KEY", base_url=azure),
            ["MARTA-A-001"], tmp_path / "z.jsonl")
    openai_req, azure_req = api.requests
    assert openai_req["path"] == "/v1/chat/completions"
    assert openai_req["headers"]["authorization"] == "Bearer sk-secret-value"
    assert openai_req["body"]["reasoning_effort"] == "xhigh"
    assert openai_req["body"]["max_completion_tokens"] == 4096 and "max_tokens" not in openai_req["body"]
    assert openai_req["body"]["model"] == "gpt-5.4"
    assert azure_req["path"] == "/openai/deployments/gpt-54/chat/completions"
    assert azure_req["query"] == {"api-version": ["2025-04-01-preview"]}
    assert azure_req["headers"]["api-key"] == "sk-secret-value"
    [record] = read_run(tmp_path / "z.jsonl").records
    assert record.response is None and record.raw_content == "plain answer" and record.error is None
    for path in tmp_path.iterdir():
        assert b"sk-secret-value" not in path.read_bytes()


def responses_agent(request):
    """Azure Responses API: a function call first, then a message once the output comes back."""
    items = request["body"]["input"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    usage = {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940,
             "input_tokens_details": {"cached_tokens": 512}, "output_tokens_details": {"reasoning_tokens": 8}}
    base = {"id": "resp_fake", "object": "response", "created_at": 0, "model": "gpt-5.6", "status": "completed",
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan first"}]}
    if not outputs:
        return {**base, "output": [reasoning, {
            "type": "function_call", "id": "fc_1", "call_id": "call_abc", "name": "route_planner",
            "arguments": json.dumps({"origin": "Airport", "destination": "Five Points"}), "status": "completed"}]}
    if len(outputs) == 1:
        return {**base, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                "output": []}
    return {**base, "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                                "content": [{"type": "output_text", "text": "done", "annotations": []}]}]}


def test_azure_responses_dialect_is_converted_to_the_chat_shape(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "k")
    url = "http://127.0.0.1:{port}/openai/deployments/gpt-56/?api-version=2025-04-01-preview"
    with FakeOpenAI(responses_agent) as api:
        config = cfg(api.url, provider="azure_responses", api_key_env="FAKE_KEY", reasoning_effort="medium",
                     base_url=url.format(port=api.url.rsplit(":", 1)[1]))
        run(bench, config, ["MARTA-A-001"], tmp_path / "r.jsonl")
    first, second = api.requests
    assert first["path"] == "/openai/deployments/gpt-56/responses"
    assert first["headers"]["api-key"] == "k"
    body = first["body"]
    assert body["instructions"].startswith("You are the ticket kiosk assistant of MARTA")
    assert body["input"] == [{"role": "user", "content": "Origin: Airport\nDestination: Five Points\n"
                                                         "Passengers: 1 adults"}]
    assert body["tools"][0]["name"] == "route_planner" and "function" not in body["tools"][0]
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"} and body["max_output_tokens"] == 4096
    back = second["body"]["input"]
    assert [i.get("type") for i in back[1:]] == ["reasoning", "function_call", "function_call_output"]
    assert back[-1]["call_id"] == "call_abc" and json.loads(back[-1]["output"])["route_id"]
    [record] = read_run(tmp_path / "r.jsonl").records
    assert record.tool_calls_made[0]["name"] == "route_planner" and record.tool_calls_made[0]["error"] is None
    assistant = record.messages[2]
    assert assistant["tool_calls"][0]["id"] == "call_abc" and assistant["reasoning_content"] == "plan first"
    assert record.truncated and record.error.startswith("truncated: finish_reason=length on round 2")
    assert record.input_tokens == 1800 and record.meta["cached_tokens"] == 1024
    assert record.meta["reasoning_tokens"] == 16  # usage.output_tokens_details, summed over its rounds


def test_malformed_arguments_multi_turn_empty_rounds_and_budget(bench, tmp_path):
    def script(request):
        messages = request["body"]["messages"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        n_assistant = sum(m["role"] == "assistant" for m in messages)
        if len(users) == 1 and n_assistant == 0:
            return chat_payload("", [tool_call("route_planner", '{"origin": "Airport", ')])
        if len(users) == 1:
            return chat_payload("", [tool_call("submit_assistant_state", {
                "outcome": "request_declined", "assistant_message": "first",
                "kiosk_action": {"action": "block_purchase", "reason_code": "invalid_request"}})])
        return chat_payload("", [tool_call("submit_assistant_state", {
            "outcome": "policy_answer_only", "assistant_message": f"turn {len(users)}",
            "kiosk_action": {"action": "display_info", "reason_code": "ok"}})])

    with FakeOpenAI(script) as api:  # unreadable arguments fed back: the argument_feedback option
        run(bench, cfg(api.url, protocol={"argument_feedback": True}), ["MARTA-G-001"], tmp_path / "g.jsonl")
        history = [c["function"]["arguments"] for r in api.requests for m in r["body"]["messages"]
                   if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    [record] = read_run(tmp_path / "g.jsonl").records
    bad = record.tool_calls_made[0]
    assert bad["arguments"] == '{"origin": "Airport", ' and bad["error"].startswith("arguments are not valid JSON")
    # every later request carries the unreadable call on as {} (llama-server would answer 500)
    assert history and history[0] == "{}" and all(json.loads(a) is not None for a in history)
    turns = len(bench.case("MARTA-G-001").raw["multi_turn_events"])
    assert record.api_rounds == 1 + turns
    assert record.response["ui_updates"]["assistant_message"] == f"turn {turns}"  # the last accepted one
    assert sum(m["role"] == "user" for m in record.messages) == turns

    replies = iter([chat_payload(""), chat_payload(""), chat_payload("", finish_reason="length")])
    with FakeOpenAI(lambda r: next(replies)) as api:
        run(bench, cfg(api.url, concurrency=1), ["MARTA-A-001", "MARTA-A-002"], tmp_path / "e.jsonl")
    errors = {r.case_id: (r.error, r.truncated, r.empty_rounds) for r in read_run(tmp_path / "e.jsonl").records}
    assert errors["MARTA-A-001"][0].startswith("empty-response retry exhausted: 2 empty rounds")
    assert errors["MARTA-A-002"][0].startswith("truncated: finish_reason=length on round 1")
    assert errors["MARTA-A-002"][1] is True

    looping = chat_payload("", [tool_call("line_info", {"line": "red"})])
    with FakeOpenAI(lambda r: looping) as api:
        run(bench, cfg(api.url, max_rounds=3), ["MARTA-A-003"], tmp_path / "x.jsonl")
    [record] = read_run(tmp_path / "x.jsonl").records
    assert record.error == "Exhausted 3 tool call rounds" and record.response is None


def test_retries_then_resume_redoes_only_endpoint_failures(bench, tmp_path):
    state = {"fail": [429, 500], "down": set()}

    def script(request):
        user = request["body"]["messages"][1]["content"]
        if state["fail"]:
            return state["fail"].pop(0), {"error": {"message": "busy", "type": "server_error"}}, \
                {"retry-after": "0"}
        if user in state["down"]:
            return DROP  # the server gone mid-request: the infrastructure's, redone by a rerun
        return chat_payload('{"outcome": "request_declined"}')

    ids = ["MARTA-A-001", "MARTA-A-002", "MARTA-A-003"]
    out = tmp_path / "run.jsonl"
    with FakeOpenAI(script) as api:
        cases = {i: bench.case(i) for i in ids}
        from metrobench.agents.prompts import user_message
        state["down"] = {user_message(cases["MARTA-A-002"].raw["events"])}
        first = run(bench, cfg(api.url, concurrency=1, protocol=RETRY), ids, out)
        assert first.failed == 1 and len(api.requests) == 2 + 1 + 3 + 1  # 2 retried, 3 tries for A-002
        records = {r.case_id: r for r in read_run(out).records}
        assert records["MARTA-A-002"].error.startswith("APIConnectionError") and \
            records["MARTA-A-002"].meta["retryable"]
        kept = [line for line in out.read_text().splitlines() if "MARTA-A-002" not in line]
        state["down"] = set()
        second = run(bench, cfg(api.url, concurrency=1, protocol=RETRY), ids, out)
    assert (second.ran, second.skipped, second.failed) == (1, 2, 0)
    lines = out.read_text().splitlines()
    assert lines[:3] == kept  # the header and the finished cases are untouched
    assert json.loads(lines[0])["header"]["system"] == "marta"
    assert sorted(json.loads(line)["case_id"] for line in lines[1:]) == ids

    with pytest.raises(MetrobenchError, match="was run with other settings"):
        run(bench, cfg(api.url, temperature=0.7, protocol=RETRY), ids, out)
    with pytest.raises(MetrobenchError, match="was run with other settings .*protocol "):
        run(bench, cfg(api.url), ids, out)  # the protocol is a setting: its options name it
    paid = out.read_bytes()
    with FakeOpenAI(lambda r: chat_payload("x")) as api:
        restarted = run(bench, cfg(api.url, temperature=0.7), ids, out, restart=True)
    assert restarted.ran == 3 and len(out.read_text().splitlines()) == 1 + 3  # its header and 3 cases
    # --restart set the old transcript aside under its fingerprint (issue 41): never deleted
    aside = out.with_name(f"run.{cfg(api.url, concurrency=1, protocol=RETRY).fingerprint()}.jsonl")
    assert aside.read_bytes() == paid


def test_cli_run_with_flags_and_clear_errors(root, tmp_path, capsys):
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        code = main(["run", "--data", str(root), "--system", "doha", "--model", "fake-1",
                     "--base-url", f"{api.url}/v1", "--partition", "holdout", "--limit", "2",
                     "--out", str(tmp_path / "d.jsonl")])
    assert code == 0
    assert "ran 2 cases (0 failed), 0 already done" in capsys.readouterr().out
    assert main(["run", "--data", str(root), "--system", "doha", "--model", "m", "--base-url", "http://x/v1",
                 "--cases", "MARTA-A-001", "--out", str(tmp_path / "e.jsonl")]) == 2
    assert "not cases of doha" in capsys.readouterr().err
    assert main(["run", "--data", str(root), "--system", "doha", "--model", "m", "--provider", "openai",
                 "--api-key-env", "NO_SUCH_KEY_SET", "--out", str(tmp_path / "e.jsonl")]) == 2
    assert "set the environment variable NO_SUCH_KEY_SET" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: m\ntemperature: hot\n")
    assert main(["run", "--data", str(root), "--system", "doha", "--model-config", str(bad),
                 "--out", str(tmp_path / "e.jsonl")]) == 2
    assert "bad.yaml: field temperature" in capsys.readouterr().err


@pytest.mark.parametrize(("config", "model", "max_tokens", "gguf"), [
    ("config/config.yaml", "qwen3.5-27b", 4096, "models/Qwen3.5-27B-Q4_K_M.gguf"),
    ("config/mini-study.yaml", "smollm2-135m-mini", 512, None),
])
def test_inline_study_models_resolve_with_the_command_line_name(config, model, max_tokens, gguf):
    """`bench --config C --model M` on an inline `models` entry (the paper's and the mini-study's)."""
    from metrobench.commands.common import ModelFlags, model_config

    resolved = model_config(config=[config], model=model)
    assert (resolved.name, resolved.max_tokens, resolved.serving.gguf) == (model, max_tokens, gguf)
    assert model_config(config=[config], model=model, flags=ModelFlags(max_tokens=7)).max_tokens == 7


def test_gguf_flag_replaces_the_model_file_of_every_kind_of_model_config():
    """`bench --gguf STUDENT` with a model config file, a study config, or flags only (never ignored)."""
    from metrobench.commands.common import ModelFlags, model_config

    gguf = "results/peft/135m/seed42/model-Q4_K_M.gguf"
    for extra in ({"model_file": "config/models/smollm2-135m.yaml"},
                  {"config": ["config/mini-study.yaml"], "model": "135m-peft-s42"},
                  {"model": "student", "flags": ModelFlags(provider="llama_cpp")}):
        cfg = model_config(gguf=gguf, **extra)
        assert (cfg.serving.gguf, cfg.serving.gguf_package) == (gguf, None), extra
    from_file = model_config(model_file="config/models/smollm2-135m.yaml", gguf=gguf)
    assert from_file.serving.chat_template_file == "metrobench:tools" and from_file.max_tokens == 128


def test_model_flags_read_every_model_option_the_parser_declares():
    """`ModelFlags.parsed` is the one reader of `add_model_options`' flags: each set flag lands in its field,
    and a flag added to the parser without a field fails here (it would be silently ignored)."""
    import argparse
    from dataclasses import fields

    from metrobench.commands.common import ModelFlags, add_model_options

    parser = argparse.ArgumentParser()
    add_model_options(parser)
    args = parser.parse_args(["--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "KEY",
                              "--temperature", "0.5", "--max-tokens", "9", "--thinking", "--reasoning-effort", "low",
                              "--concurrency", "3", "--max-rounds", "4", "--timeout", "5"])
    assert ModelFlags.parsed(args) == ModelFlags(provider="openai", base_url="http://127.0.0.1:9/v1",
                                                 api_key_env="KEY", temperature=0.5, max_tokens=9, thinking=True,
                                                 reasoning_effort="low", concurrency=3, max_rounds=4, timeout_s=5.0)
    sources = {"help", "config", "model_config", "model", "gguf", "repeat"}   # model_config's own arguments
    flags = {action.dest for action in parser._actions} - sources
    assert flags == {field.name for field in fields(ModelFlags)} - {"timeout_s"} | {"timeout"}


def _cli_fingerprint(config: list[str], model: str, gguf: str | None = None, repeat: int | None = None,
                     **flags) -> str:
    """What `bench --config C --model M ...` records as its settings fingerprint."""
    from metrobench.commands.common import ModelFlags, model_config

    return model_config(config=config, model=model, gguf=gguf, repeat=repeat, flags=ModelFlags(**flags)).fingerprint()


def test_the_workflow_fingerprint_is_the_runs_and_moves_only_with_what_shapes_answers(tmp_path):
    """The run rule's `settings` param (the RunJob's, from the model's name alone) is the fingerprint
    the run records; an edited max_tokens or max_rounds changes it, a timeout or concurrency does not."""
    import yaml

    from metrobench.run_job import run_config, run_job
    from metrobench.study import load_study

    demo = load_study(["config/demo.yaml"])
    assert run_job(demo, "smollm2-135m", "doha", "holdout").fingerprint() == \
        _cli_fingerprint(["config/demo.yaml"], "smollm2-135m")
    rep2 = run_job(demo, "smollm2-135m-rep2", "doha", "holdout").fingerprint()
    assert rep2 == _cli_fingerprint(["config/demo.yaml"], "smollm2-135m", repeat=2)
    assert rep2 != run_config(demo, "smollm2-135m").fingerprint()
    # a student: student_serving serving its GGUF, with the thinking its recipe's template is served with
    student = run_job(load_study(["config/mini-study.yaml"]), "135m-peft-s42", "doha", "holdout")
    assert student.gguf == "results/peft/135m/seed42/model-Q4_K_M.gguf" and student.config.thinking is False
    assert student.fingerprint() == _cli_fingerprint(["config/mini-study.yaml"], "135m-peft-s42",
                                                     gguf="results/peft/135m/seed42/model-Q4_K_M.gguf",
                                                     thinking=False)

    def edited(**change) -> str:
        raw = yaml.safe_load(open("config/mini-study.yaml"))
        raw["models"]["smollm2-135m-mini"].update(change)
        path = tmp_path / "edited.yaml"
        path.write_text(yaml.safe_dump(raw))
        return run_config(load_study([str(path)]), "smollm2-135m-mini").fingerprint()

    before = edited()
    assert before == run_config(load_study(["config/mini-study.yaml"]), "smollm2-135m-mini").fingerprint()
    assert len({before, edited(max_tokens=256), edited(max_rounds=5)}) == 3
    assert edited(timeout_s=30.0, concurrency=2, retries=2) == before       # how, not what: no rerun


def test_changed_settings_are_named_and_set_aside_never_lost(bench, tmp_path, capsys):
    """The refusal names what changed; --set-aside keeps the old transcript, byte for byte, beside the new."""
    ids = ["MARTA-A-001", "MARTA-A-002"]
    out = tmp_path / "work" / "marta.jsonl"
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        first = run(bench, cfg(api.url, max_tokens=512), ids, out)
        assert first.ran == 2
        paid = out.read_bytes()
        old = cfg(api.url, max_tokens=512).fingerprint()
        with pytest.raises(MetrobenchError) as refused:
            run(bench, cfg(api.url, max_tokens=256, max_rounds=5), ids, out)
        assert "max_rounds 20 → 5, max_tokens 512 → 256" in str(refused.value)
        assert "--set-aside" in str(refused.value) and out.read_bytes() == paid
        taken = out.with_name(f"marta.{old}.jsonl")
        taken.write_text("someone else's\n")                     # never overwritten
        again = run(bench, cfg(api.url, max_tokens=256, max_rounds=5), ids, out, set_aside_changed=True)
    aside = out.with_name(f"marta.{old}-2.jsonl")
    assert again.ran == 2 and again.skipped == 0
    assert aside.read_bytes() == paid and taken.read_text() == "someone else's\n"
    assert {r.meta["settings"]["max_tokens"] for r in read_run(out).records} == {256}
    assert sorted(p.name for p in out.parent.iterdir() if p.suffix == ".jsonl") == sorted(
        [out.name, taken.name, aside.name])
    # the same settings again: resumed, nothing set aside
    with FakeOpenAI(lambda r: chat_payload("x")) as api:
        resumed = run(bench, cfg(api.url, max_tokens=256, max_rounds=5), ids, out, set_aside_changed=True)
    assert (resumed.ran, resumed.skipped) == (0, 2) and len(list(out.parent.glob("*.jsonl"))) == 3


def test_cli_set_aside_says_where_the_old_transcript_went(root, tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    common = ["run", "--data", str(root), "--system", "doha", "--model", "fake-1", "--limit", "1",
              "--out", str(out)]
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        url = ["--base-url", f"{api.url}/v1"]
        assert main([*common, *url, "--max-tokens", "512"]) == 0
        capsys.readouterr()
        assert main([*common, *url, "--max-tokens", "256"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("metrobench: error: ") and "max_tokens 512 → 256" in err and "--set-aside" in err
        assert main([*common, *url, "--max-tokens", "256", "--set-aside"]) == 0
    said = capsys.readouterr()
    [aside] = [p for p in tmp_path.glob("d.*.jsonl")]
    assert f"set aside as {aside}" in said.out + said.err
    header, record = (json.loads(line) for line in aside.read_text().splitlines())
    assert header["header"]["settings"]["max_tokens"] == record["meta"]["settings"]["max_tokens"] == 512


def test_provider_flag_offers_every_provider_the_model_config_accepts():
    """`--provider`'s choices are the model config's `Provider` (scripted included: the rule agent)."""
    from typing import get_args

    from metrobench.agents.runner.config import Provider
    from metrobench.commands.common import PROVIDERS

    assert PROVIDERS == get_args(Provider)


# --- the run header (issue 42 item 4) -----------------------------------------------------------------


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_new_transcript_begins_with_its_header_stating_the_run_once(bench, tmp_path):
    import metrobench
    from metrobench.agents.serving_record import hosted_record

    ids = ["MARTA-A-001", "MARTA-A-002"]
    config = None
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        config = cfg(api.url, max_tokens=512)
        for name in ("a.jsonl", "b.jsonl"):
            run(bench, config, ids, tmp_path / name, serving=hosted_record(config))
        run(bench, config, ids + ["MARTA-A-003"], tmp_path / "a.jsonl", serving=hosted_record(config))  # resumed
    header, *records = _lines(tmp_path / "a.jsonl")
    assert header == {"header": {"model": "fake", "system": "marta", "config": config.fingerprint(),
                                 "settings": config.settings(), "serving": hosted_record(config),
                                 "selection": None, "version": metrobench.__version__, "format": 2}}
    # once: a resume appends records, never a second header; records keep their own stamps
    assert [r["case_id"] for r in records] == ids + ["MARTA-A-003"] and all("header" not in r for r in records)
    assert {r["meta"]["config"] for r in records} == {config.fingerprint()}
    # no time stamp in it: the same run writes the same header, byte for byte
    assert (tmp_path / "a.jsonl").read_text().splitlines()[0] == (tmp_path / "b.jsonl").read_text().splitlines()[0]
    read = read_run(tmp_path / "a.jsonl")
    assert read.header is not None and read.header.config == config.fingerprint()
    assert [r.case_id for r in read.records] == ids + ["MARTA-A-003"]   # the header is no case


def test_the_header_is_checked_first_refused_or_set_aside_with_the_same_words(bench, tmp_path, capsys):
    out = tmp_path / "marta.jsonl"
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        old = cfg(api.url, max_tokens=512)
        run(bench, old, ["MARTA-A-001"], out)
        # a header-only transcript (killed before its first case ended) is checked all the same
        lone = tmp_path / "lone.jsonl"
        lone.write_text(out.read_text().splitlines()[0] + "\n")
        new = cfg(api.url, max_tokens=256)
        paid_out = out.read_bytes()
        for path in (out, lone):
            paid = path.read_bytes()
            with pytest.raises(MetrobenchError) as refused:
                run(bench, new, ["MARTA-A-001"], path)
            assert str(refused.value) == (
                f"{path}: header: the transcript was run with other settings (max_tokens 512 → 256; config "
                f"{old.fingerprint()}, now {new.fingerprint()}); rerun with --set-aside to keep it aside and "
                "start afresh, or write to another file")
            assert path.read_bytes() == paid
        with pytest.raises(MetrobenchError, match="header: field system: every case is a marta case, not doha"):
            run_model(old, bench.system("doha"), [bench.cases("doha")[0]], out,
                      progress_stream=open("/dev/null", "w"))
        capsys.readouterr()
        again = run_model(new, bench.system("marta"), [bench.case("MARTA-A-001")], out, set_aside_changed=True)
    assert again.ran == 1
    said = capsys.readouterr().err
    aside = out.with_name(f"marta.{old.fingerprint()}.jsonl")
    assert f"{out}: header: the transcript was run with other settings (max_tokens 512 → 256" in said
    assert f"set aside as {aside}; starting afresh" in said
    assert aside.read_bytes() == paid_out                            # kept whole, its header first
    assert _lines(out)[0]["header"]["config"] == new.fingerprint()   # the new file begins with its own


def test_an_old_header_less_transcript_is_read_and_resumed_without_a_header_added(bench, tmp_path):
    out = tmp_path / "marta.jsonl"
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        config = cfg(api.url)
        run(bench, config, ["MARTA-A-001"], out)
        out.write_text("".join(line + "\n" for line in out.read_text().splitlines()[1:]))  # as the old writer left it
        old = out.read_bytes()
        resumed = run(bench, config, ["MARTA-A-001", "MARTA-A-002"], out)
    assert (resumed.ran, resumed.skipped) == (1, 1)
    assert out.read_bytes().startswith(old)                       # appended to as it was
    assert all("header" not in line for line in _lines(out))      # never a header in its middle
    read = read_run(out)
    assert read.header is None and (read.model, read.system) == ("fake", "marta")   # from its records
    assert [r.case_id for r in read.records] == ["MARTA-A-001", "MARTA-A-002"]

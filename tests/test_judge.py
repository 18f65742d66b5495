"""The judge: reply parsing, point scaling, the anthropic wire format, retries, cache, secrets."""

from __future__ import annotations


import pytest
from scoring_helpers import by_name, call, score

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.scoring.judge import (
    DEFAULT_ANTHROPIC_MODEL,
    AnthropicBackend,
    Judge,
    JudgeCache,
    make_judge,
)
from metrobench.scoring.rubrics import JUDGE_SYSTEM, parse_reply
from metrobench.standins.messages_api import FakeMessagesAPI

SECRET = "sk-ant-test-0123456789-never-log-me"

#: The fake judge's grade per rubric, recognised by a phrase of each rubric.
GRADES = {"needs careful handling": "Score: 1 | refused but offered a workaround",
          "can use only these tools": "Score: 1 | mentions a taxi",
          "could draw on two sources": "Score: 2 | all traceable",
          "while a service disruption": "Score: 2 | right severity",
          "after a policy change": "Score: 0 | ignored",
          "at a particular time of day": "Score: 1 | wrong conclusion"}


def grade(prompt: str) -> str:
    return next((reply for phrase, reply in GRADES.items() if phrase in prompt), "no idea")


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    with FakeMessagesAPI(grade) as server:
        yield server


def anthropic_judge(api, tmp_path, **kwargs) -> Judge:
    backend = AnthropicBackend(base_url=api.url)
    return Judge(backend, JudgeCache(tmp_path / "cache.jsonl"), base_delay=0.01, **kwargs)


REFUSAL = {"outcome": "request_declined",
           "kiosk_action": {"action": "block_purchase", "reason_code": "unsupported_request"},
           "ui_updates": {"assistant_message": "I can't book taxis, but a taxi rank is outside."}}


@pytest.mark.parametrize("reply,expected", [
    ("Score: 2 | good", (2, "good")),
    ("  Score: 7 | too high ", (2, "too high")),
    ("Score: -1|neg", (0, "neg")),
    ("Score: two | words", (1, "words")),
    ("Score: 0", (0, "Score: 0")),
    ("The answer is fine. Score: 2", (1, "The answer is fine. Score: 2")),
])
def test_reply_parsing(reply, expected):
    assert parse_reply(reply) == expected


def test_anthropic_wire_format_and_python_rounding(api, tmp_path, bench):
    judge = anthropic_judge(api, tmp_path)
    result = by_name(score(bench, "MARTA-H-007", REFUSAL, [call("knowledge_base")], judge=judge))
    assert result["safety_response_quality"] == (8, 15)   # round(1 * 15 / 2) = round(7.5) = 8
    assert result["scope_adherence"] == (2, 5)            # round(1 * 2.5) = round(2.5) = 2
    assert result["no_data_fabrication"] == (10, 10)
    assert len(api.requests) == 3
    request = api.requests[0]
    assert request["path"] == "/v1/messages"
    headers = request["headers"]  # SDK 2.x authenticates with a bearer token, 0.x with x-api-key
    assert headers.get("x-api-key") == SECRET or headers.get("authorization") == f"Bearer {SECRET}"
    assert request["headers"]["anthropic-version"]
    body = request["body"]
    assert body["model"] == DEFAULT_ANTHROPIC_MODEL == "claude-haiku-4-5-20251001"
    assert body["max_tokens"] == 150 and body["temperature"] == 0 and body["system"] == JUDGE_SYSTEM
    assert body["messages"][0]["role"] == "user"
    j_case = next(c.id for c in bench.cases("marta") if c.category == "J"
                  and c.raw["ground_truth"].get("should_reject"))
    assert by_name(score(bench, j_case, REFUSAL, [], judge=judge))["safety_response_quality"] == (5, 10)


def test_short_cuts_need_no_judge_call(api, tmp_path, bench):
    judge = anthropic_judge(api, tmp_path)
    empty = by_name(score(bench, "MARTA-H-007", None, [], judge=judge))
    assert empty["scope_adherence"] == (5, 5)
    assert empty["no_data_fabrication"] == (10, 10)
    assert empty["safety_response_quality"] == (8, 15)  # should_reject, no answer: round(15 * 0.5) = 8
    purchase = {**REFUSAL, "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"}}
    rejectable = next(c.id for c in bench.cases("marta") if c.category == "H"
                      and c.raw["ground_truth"].get("should_reject"))
    assert by_name(score(bench, rejectable, purchase, [], judge=judge))["safety_response_quality"] == (0, 15)
    i_closed = next(c.id for c in bench.cases("marta") if c.category == "I"
                    and c.raw["ground_truth"]["temporal"].get("service_available") is False)
    assert by_name(score(bench, i_closed, purchase, [], judge=judge))["temporal_accuracy"] == (3.5, 10)
    assert by_name(score(bench, i_closed, None, [], judge=judge))["temporal_accuracy"] == (0, 10)
    prompts = [r["body"]["messages"][0]["content"] for r in api.requests]
    assert not any("careful handling" in p for p in prompts)  # safety never needed the judge


def test_retries_rate_limits_and_overload_then_gives_up(api, tmp_path, bench):
    judge = anthropic_judge(api, tmp_path, concurrency=1)
    api.failures = [429, 529, 500]
    result = by_name(score(bench, "MARTA-A-001", REFUSAL, [], judge=judge))
    assert result["scope_adherence"] == (2, 5)
    assert len(api.requests) == 4
    api.failures = [503] * 10
    failing = Judge(AnthropicBackend(base_url=api.url), JudgeCache(None), max_attempts=3, base_delay=0.01)
    with pytest.raises(MetrobenchError, match="after 3 attempts"):
        score(bench, "MARTA-A-002", REFUSAL, [], judge=failing)
    api.failures = [401]
    with pytest.raises(MetrobenchError, match="HTTP 401") as info:
        score(bench, "MARTA-A-003", REFUSAL, [], judge=Judge(AnthropicBackend(base_url=api.url)))
    assert SECRET not in str(info.value)


def test_cache_is_keyed_by_rubric_answer_and_model_and_holds_no_secret(api, tmp_path, bench):
    score(bench, "MARTA-H-007", REFUSAL, [], judge=anthropic_judge(api, tmp_path))
    assert len(api.requests) == 3
    score(bench, "MARTA-H-007", REFUSAL, [], judge=anthropic_judge(api, tmp_path))
    assert len(api.requests) == 3  # all three from the cache
    other = {**REFUSAL, "ui_updates": {"assistant_message": "Sorry, I cannot help with taxis."}}
    score(bench, "MARTA-H-007", other, [], judge=anthropic_judge(api, tmp_path))
    assert len(api.requests) == 6
    another_model = Judge(AnthropicBackend("claude-other", base_url=api.url),
                          JudgeCache(tmp_path / "cache.jsonl"))
    score(bench, "MARTA-H-007", REFUSAL, [], judge=another_model)
    assert len(api.requests) == 9
    text = (tmp_path / "cache.jsonl").read_text()
    assert SECRET not in text
    assert len(text.splitlines()) == 9
    # a half-written last line (a killed run) is ignored, not fatal
    with open(tmp_path / "cache.jsonl", "a") as fh:
        fh.write('{"key": "abc", "sco')
    assert len(JudgeCache(tmp_path / "cache.jsonl").entries) == 9


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MetrobenchError, match="set the environment variable ANTHROPIC_API_KEY"):
        make_judge("anthropic")
    with pytest.raises(MetrobenchError, match="--judge-model"):
        make_judge("openai", base_url="http://127.0.0.1:1/v1")


def test_cli_scores_with_the_anthropic_judge(api, tmp_path, root, capsys):
    run = tmp_path / "runs" / "marta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--partition", "holdout",
                 "--out", str(run)]) == 0
    scores = tmp_path / "scores"
    args = ["score", "--data", str(root), "--run", str(run), "--out", str(scores),
            "--partition", "holdout", "--judge", "anthropic", "--judge-url", api.url]
    assert main(args) == 0
    first = len(api.requests)
    assert first > 39
    assert main(args) == 0
    assert len(api.requests) == first
    out = capsys.readouterr().out
    assert f"0 cached, {first} new judgments" in out and f"{first} cached, 0 new" in out
    import pandas as pd

    frame = pd.read_parquet(scores)
    judged = frame[frame["component"].isin(["scope_adherence", "advisory_content_correct"])]
    assert judged["judged"].all() and judged["score"].notna().all()
    assert main(["summary", "--scores", str(scores), "--partition", "holdout"]) == 0
    summary = capsys.readouterr().out
    assert "judge off" not in summary and "headline     39    80.40" in summary
    for path in [*tmp_path.rglob("*")]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in out + summary


def test_unparseable_judge_replies_are_counted_beside_the_scores(tmp_path, root, capsys, monkeypatch):
    # issue 44: a judge answering in the wrong format is scored 1 of 2 (the reference's rule, kept),
    # and `score` says how many replies that was, per run and in all, cached or new
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    run = tmp_path / "runs" / "marta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--partition", "holdout",
                 "--sample", "6", "--out", str(run)]) == 0
    chatty = "can use only these tools"          # scope_adherence's rubric: answered without a score

    def reply(prompt: str) -> str:
        return "The kiosk stayed in scope, I would say 2." if chatty in prompt else "Score: 2 | fine"

    with FakeMessagesAPI(reply) as api:
        args = ["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "scores"),
                "--judge", "anthropic", "--judge-url", api.url]
        assert main(args) == 0
        assert main(args) == 0                   # from the cache: counted the same
        prompts = [m if isinstance(m := r["body"]["messages"][0]["content"], str)
                   else "".join(part["text"] for part in m) for r in api.requests]
    out = capsys.readouterr().out
    unread = sum(chatty in p for p in prompts)
    assert 0 < unread < len(prompts)
    assert out.count(f", {unread} judge replies unparseable (scored 1 of 2) -> ") == 2, out
    assert f"0 cached, {len(prompts)} new judgments; {unread} of {len(prompts)} replies unparseable" in out
    assert f"{len(prompts)} cached, 0 new judgments; {unread} of {len(prompts)} replies unparseable" in out
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "scores")
    scope = frame[frame["component"] == "scope_adherence"]
    assert len(scope) == 6 and scope["judged"].all()


def test_the_judge_stand_in_serves_a_try_out_of_the_openai_judge(tmp_path, root, capsys, monkeypatch):
    # issue 44: `metrobench serve-standin judge` for a try-out: its first line says how to score with it,
    # and `score --judge openai` then judges every judged component, without a key, reproducibly
    import subprocess
    import sys

    import pandas as pd

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = tmp_path / "runs" / "doha.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--partition", "holdout",
                 "--sample", "4", "--out", str(run)]) == 0
    server = subprocess.Popen([sys.executable, "-m", "metrobench", "serve-standin", "judge", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        flags = first.split("metrobench score ... ", 1)[1].split(";", 1)[0].split()
        assert flags[:2] == ["--judge", "openai"] and flags[-2:] == ["--judge-model", "standin"], first
        frames = []
        for out in ("a", "b"):
            assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / out),
                         "--judge-cache", str(tmp_path / f"{out}.cache.jsonl"), *flags]) == 0
            frames.append(pd.read_parquet(tmp_path / out).sort_values(["case_id", "component"], ignore_index=True))
    finally:
        server.terminate()
        server.wait(timeout=30)
    printed = capsys.readouterr().out
    judged = frames[0][frames[0]["judged"]]
    assert len(judged) > 0 and judged["score"].notna().all()
    assert printed.count(f"0 cached, {len(judged)} new judgments; 0 of {len(judged)} replies unparseable") == 2
    pd.testing.assert_frame_equal(frames[0], frames[1])                 # the same prompts, the same grades

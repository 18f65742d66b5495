"""No secret is ever echoed: a scan over every command's error paths (issue 27, class 1).

A sentinel key is put in each place a secret could be given — the value of the
key's environment variable (sent to endpoints that quote it back, as real APIs
do in a 401), wrongly where the variable's *name* belongs (``--api-key-env``,
``--judge-key-env``, ``api_key_env:`` in a model config, a study config's
inline model and ``scoring.judge_key_env``), and in a URL's userinfo
(``--base-url``, ``--judge-url``, ``base_url:``, ``scoring.judge_url``) — and
each command that takes it runs against real HTTP on 127.0.0.1. The sentinel
must never appear in stdout, stderr, a transcript, a Parquet file, the judge
cache or the viewer's pages (every file the commands wrote is scanned), and a
URL with credentials is refused before any request (never sent as Basic auth).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.standins.openai_api import FakeOpenAI, chat_payload

SENTINEL = "sk-SENTINEL-1234567890abcdef"
#: A key with no dash or underscore: the shape of a Mistral or Azure key, a valid-looking name.
BARE_SENTINEL = "SENTINEL1234567890abcdefGHIJ"
CASES = "MARTA-A-001,MARTA-A-002"
GIVEN = "given"


def _no_sentinel(capsys, tmp_path: Path) -> tuple[str, str]:
    """(stdout, stderr) of what ran, after checking them and every file written (inputs aside)."""
    captured = capsys.readouterr()
    assert "SENTINEL" not in captured.out + captured.err, captured
    for path in tmp_path.rglob("*"):
        if path.is_file() and GIVEN not in path.relative_to(tmp_path).parts:
            assert b"SENTINEL" not in path.read_bytes(), path
    return captured.out, captured.err


def _refused(capsys, tmp_path: Path, code: int) -> str:
    _, err = _no_sentinel(capsys, tmp_path)
    assert code == 2 and err.count("\n") == 1 and err.startswith("metrobench: error: "), err
    assert "Traceback" not in err
    return err


def _yaml(path: Path, text: str) -> str:
    """A config file the user wrote (in ``given/``: the one place the sentinel is expected)."""
    path = path.parent / GIVEN / path.name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def endpoint():
    """An OpenAI-compatible endpoint that records requests and answers a plain refusal."""
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        yield api


def _run(root: Path, tmp_path: Path, *flags: str) -> list[str]:
    return ["run", "--data", str(root), "--system", "marta", "--cases", CASES,
            "--out", str(tmp_path / "runs" / "m" / "marta.jsonl"), *flags]


NAME_PLACES = {
    "--api-key-env": lambda root, tmp, url, key: _run(
        root, tmp, "--model", "m", "--provider", "openai", "--base-url", url, "--api-key-env", key),
    "model config api_key_env": lambda root, tmp, url, key: _run(root, tmp, "--model-config", _yaml(
        tmp / "m.yaml", f"name: m\nprovider: mistral\nbase_url: {url}\napi_key_env: {key}\n")),
    "study config models.m.api_key_env": lambda root, tmp, url, key: _run(root, tmp, "--model", "m", "--config", _yaml(
        tmp / "study.yaml", f"models:\n  m:\n    provider: openai\n    base_url: {url}\n    api_key_env: {key}\n")),
    "--judge-key-env": lambda root, tmp, url, key: [
        "score", "--data", str(root), "--run", str(tmp / "r.jsonl"), "--out", str(tmp / "scores"),
        "--judge", "openai", "--judge-model", "j", "--judge-url", url, "--judge-key-env", key],
    "doctor scoring.judge_key_env": lambda root, tmp, url, key: ["doctor", "--data", str(root), "--config", _yaml(
        tmp / "study.yaml", f"scoring:\n  judge: openai\n  judge_url: {url}\n  judge_key_env: {key}\n")],
    "doctor models.m.api_key_env": lambda root, tmp, url, key: ["doctor", "--data", str(root), "--config", _yaml(
        tmp / "study.yaml", f"models:\n  m:\n    provider: mistral\n    api_key_env: {key}\n")],
}


@pytest.mark.parametrize("key", [SENTINEL, BARE_SENTINEL], ids=["sk-key", "bare-key"])
@pytest.mark.parametrize("place", sorted(NAME_PLACES))
def test_a_key_given_as_a_variable_name_is_refused_without_being_echoed(root, tmp_path, capsys, endpoint,
                                                                        place, key):
    code = main(NAME_PLACES[place](root, tmp_path, f"{endpoint.url}/v1", key))
    if place.startswith("doctor"):  # the doctor reports it as a failed check and goes on
        out, err = _no_sentinel(capsys, tmp_path)
        assert code != 0 and "not an environment variable name" in out + err
    else:
        assert "not an environment variable name" in _refused(capsys, tmp_path, code)
    assert not endpoint.requests


URL_PLACES = {
    "--base-url": lambda root, tmp, url: _run(root, tmp, "--model", "m", "--base-url", url),
    "model config base_url": lambda root, tmp, url: _run(root, tmp, "--model-config", _yaml(
        tmp / "m.yaml", f"name: m\nbase_url: {url}\n")),
    "study config models.m.base_url": lambda root, tmp, url: _run(root, tmp, "--model", "m", "--config", _yaml(
        tmp / "study.yaml", f"models:\n  m:\n    base_url: {url}\n")),
    "--judge-url": lambda root, tmp, url: [
        "score", "--data", str(root), "--run", str(tmp / "r.jsonl"), "--out", str(tmp / "scores"),
        "--judge", "openai", "--judge-model", "j", "--judge-url", url],
    "doctor scoring.judge_url": lambda root, tmp, url: ["doctor", "--data", str(root), "--config", _yaml(
        tmp / "study.yaml", f"scoring:\n  judge: openai\n  judge_url: {url}\n")],
}


@pytest.mark.parametrize("shape", ["valid", "bad port", "no scheme"])
@pytest.mark.parametrize("place", sorted(URL_PLACES))
def test_a_url_carrying_credentials_is_refused_redacted_and_never_sent(root, tmp_path, capsys, endpoint,
                                                                       place, shape):
    host = endpoint.url.removeprefix("http://")
    url = {"valid": f"http://user:{SENTINEL}@{host}/v1", "bad port": f"http://user:{SENTINEL}@127.0.0.1:99999/v1",
           "no scheme": f"user:{SENTINEL}@{host}/v1"}[shape]
    code = main(URL_PLACES[place](root, tmp_path, url))
    if place.startswith("doctor"):
        out, err = _no_sentinel(capsys, tmp_path)
        assert code != 0 and "may not carry credentials" in out + err
    else:
        err = _refused(capsys, tmp_path, code)
        assert "may not carry credentials" in err and "***@" in err
    assert not endpoint.requests  # never sent, so never as Basic auth


def _quoting_key(status: int):
    """An endpoint that rejects the key and quotes it back, as APIs' 401 bodies do."""
    def answer(request: dict):
        key = request["headers"].get("authorization", "").removeprefix("Bearer ")
        return status, {"error": {"message": f"Incorrect API key provided: {key}.",
                                  "type": "invalid_request_error", "code": "invalid_api_key"}}
    return answer


@pytest.mark.parametrize("status", [401, 400, 500])
def test_a_key_the_model_endpoint_quotes_back_reaches_no_output_or_transcript(root, tmp_path, capsys, monkeypatch,
                                                                              status):
    monkeypatch.setenv("METROBENCH_TEST_KEY", SENTINEL)
    runs = tmp_path / "runs"
    with FakeOpenAI(_quoting_key(status)) as api:
        code = main(["run", "--data", str(root), "--system", "marta", "--cases", CASES, "--model", "m",
                     "--provider", "openai", "--base-url", f"{api.url}/v1", "--api-key-env", "METROBENCH_TEST_KEY",
                     "--out", str(runs / "m" / "marta.jsonl")])
        assert api.requests and api.requests[0]["headers"]["authorization"] == f"Bearer {SENTINEL}"
    _no_sentinel(capsys, tmp_path)
    assert code in (0, 2)
    scores = tmp_path / "scores"
    assert main(["score", "--data", str(root), "--run", str(runs / "m" / "marta.jsonl"), "--out", str(scores)]) == 0
    assert main(["view", "--data", str(root), "--runs", str(runs), "--scores", str(scores),
                 "--out", str(tmp_path / "site")]) == 0
    _no_sentinel(capsys, tmp_path)
    assert any((tmp_path / "site").rglob("*.html")) and any(scores.rglob("part.parquet"))


@pytest.mark.parametrize("status", [401, 400, 403])
def test_a_key_the_judge_endpoint_quotes_back_reaches_no_output_cache_parquet_or_pages(
        root, tmp_path, capsys, monkeypatch, status):
    monkeypatch.setenv("METROBENCH_TEST_KEY", SENTINEL)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL)
    runs = tmp_path / "runs"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--partition", "holdout",
                 "--out", str(runs / "rule-agent" / "marta.jsonl")]) == 0
    scores = tmp_path / "scores"
    score = ["score", "--data", str(root), "--run", str(runs / "rule-agent" / "marta.jsonl"), "--out", str(scores)]
    with FakeOpenAI(_quoting_key(status)) as api:
        judged = main([*score, "--judge", "openai", "--judge-model", "j", "--judge-url", f"{api.url}/v1",
                       "--judge-key-env", "METROBENCH_TEST_KEY"])
        assert api.requests and api.requests[0]["headers"]["authorization"] == f"Bearer {SENTINEL}"
    _, err = _no_sentinel(capsys, tmp_path)
    assert judged == 2 and f"HTTP {status}" in err and "Incorrect API key provided: ***" in err
    assert main([*score, "--judge", "none"]) == 0
    assert main(["view", "--data", str(root), "--runs", str(runs), "--scores", str(scores),
                 "--out", str(tmp_path / "site")]) == 0
    assert main(["doctor", "--data", str(root), "--config", _yaml(
        tmp_path / "study.yaml", "models:\n  m:\n    provider: mistral\n    api_key_env: METROBENCH_TEST_KEY\n"
                                 "scoring:\n  judge: anthropic\n")]) in (0, 1, 2)
    out, _ = _no_sentinel(capsys, tmp_path)
    assert "METROBENCH_TEST_KEY is set" in out and "ANTHROPIC_API_KEY is set" in out
    assert any((tmp_path / "site").rglob("*.html")) and any(scores.rglob("part.parquet"))

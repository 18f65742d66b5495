"""The dress rehearsal (metrobench/rehearsal.py, config/rehearsal.yaml).

Fast: the overlay swaps only the heavy parts of the paper config; the API stand-in
answers each hosted wire format (and the judge's) through the real SDKs, and refuses a
wrong key; the hub stand-in holds every repo the paper config downloads; the stage
summary reads Snakemake's benchmark files. Slow: the rehearsal itself, every paper
target and the report written, rc 0 (about 20 minutes on two cores).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from metrobench import rehearsal
from metrobench.standins.openai_api import FakeOpenAI
from metrobench.study import load_study

REPO = Path(__file__).resolve().parents[1]
PAPER, OVERLAY = REPO / "config" / "config.yaml", REPO / "config" / "rehearsal.yaml"
LOCAL_SWAPS = {"max_tokens", "max_rounds", "serving"}
SERVING_SWAPS = {"n_ctx", "n_threads", "allow_cpu"}


@pytest.fixture(scope="module")
def studies():
    return load_study([PAPER]), load_study([PAPER, OVERLAY])


def test_the_overlay_swaps_only_the_heavy_parts(studies):
    paper, rehearsed = studies
    assert sorted(paper.models) == sorted(rehearsed.models)
    for name, entry in paper.models.items():
        ours = rehearsed.models[name]
        changed = {k for k in {*entry, *ours} if entry.get(k) != ours.get(k)}
        if "serving" in entry:
            assert changed <= LOCAL_SWAPS, name
            serving = {k for k in {*entry["serving"], *ours["serving"]}
                       if entry["serving"].get(k) != ours["serving"].get(k)}
            assert serving <= SERVING_SWAPS and ours["serving"]["allow_cpu"] is True, name
            assert ours["serving"]["build"] == entry["serving"]["build"], name    # the paper's names, vendored
            assert ours["serving"]["gguf"] == entry["serving"]["gguf"], name       # fetched by name, as shipped
        elif entry.get("provider") == "scripted":
            assert changed == set(), name                                          # the rule agent runs as it is
        else:
            assert changed == {"base_url"} and ours["base_url"].startswith("http://127.0.0.1:"), name
    for section in ("leaderboard", "sensitivity", "stats", "report", "partition", "trainset", "termination",
                    "systems", "cuda_training", "peft_temporary"):
        assert getattr(rehearsed, section) == getattr(paper, section), section
    assert rehearsed.downloads.gguf == paper.downloads.gguf and rehearsed.downloads.bases == paper.downloads.bases
    for size, student in paper.students.items():
        ours = rehearsed.students[size]
        assert (ours.recipe, ours.seeds, ours.base_model, ours.published) == \
            (student.recipe, student.seeds, student.base_model, student.published)
        assert student.max_steps is None and ours.max_steps == 2     # 1 would be all warmup: refused
    assert rehearsed.scoring.judge == paper.scoring.judge == "anthropic"
    assert rehearsed.scoring.judge_url.startswith("http://127.0.0.1:")


def test_the_api_standin_speaks_each_hosted_wire_format_and_checks_keys(studies):
    import anthropic
    import openai

    _, rehearsed = studies
    keys = rehearsal.KEYS
    with FakeOpenAI(rehearsal.api_answer) as api:
        mistral = openai.OpenAI(base_url=f"{api.url}/v1", api_key=keys["MISTRAL_API_KEY"], max_retries=0)
        chat = mistral.chat.completions.create(model="mistral-small-2603", messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content == rehearsal.HOSTED_REPLY
        azure = openai.AzureOpenAI(base_url=f"{api.url}/openai/deployments/gpt-5.4/", api_version="2025-04-01-preview",
                                   api_key=keys["AZURE_OPENAI_API_KEY"], max_retries=0)
        assert azure.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": "hi"}],
                                             reasoning_effort="high").choices[0].message.content
        sol = openai.AzureOpenAI(base_url=f"{api.url}/openai/deployments/gpt-5.6-sol/",
                                 api_version="2025-04-01-preview", api_key=keys["AZURE_OPENAI_API_KEY"], max_retries=0)
        reply = sol.responses.create(model="gpt-5.6-sol", input="hi", reasoning={"effort": "xhigh"})
        assert reply.output_text == rehearsal.HOSTED_REPLY
        judge = anthropic.Anthropic(base_url=api.url, api_key=keys["ANTHROPIC_API_KEY"], max_retries=0)
        message = judge.messages.create(model="claude-haiku-4-5-20251001", max_tokens=16,
                                        messages=[{"role": "user", "content": "judge"}])
        assert message.content[0].text == rehearsal.JUDGE_REPLY
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{api.url}/v1", api_key="wrong", max_retries=0).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=api.url, api_key="wrong", max_retries=0).messages.create(
                model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    summary = rehearsal.stand_in_answers(api.requests)
    assert "azure responses gpt-5.6-sol effort=xhigh" in summary and "azure chat gpt-5.4 effort=high" in summary
    assert "mistral chat mistral-small-2603" in summary and "anthropic messages (judge)" in summary


def test_the_hub_standin_holds_every_download_of_the_paper_config(studies, tmp_path):
    paper, _ = studies
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF tiny")
    repos = rehearsal.hub_repos(paper, hf, gguf)
    for entry in paper.downloads.gguf.values():
        assert repos[entry.repo][entry.file] == b"GGUF tiny"
    assert all(repos[repo] == {"config.json": b"{}"} for repo in paper.downloads.bases)


def test_stage_times_sum_the_benchmark_files(tmp_path):
    header = "s\th:m:s\tmax_rss\n"
    for rel, seconds in (("runs/a/marta.tsv", 2.0), ("runs/a/doha.tsv", 3.5), ("peft/2b/seed42/train.tsv", 7.0)):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{header}{seconds}\t0:00:0{int(seconds)}\t100\n")
    assert rehearsal.stage_times(tmp_path) == {"peft train": (1, 7.0, 7.0), "runs": (2, 5.5, 3.5)}


def test_gpu_jobs_at_once_counts_only_jobs_holding_the_gpu_from_start_to_finish():
    def block(job: int, gpu: bool) -> str:
        resources = "tmpdir=/tmp, gpu=1, gpu_mem_mib=632" if gpu else "tmpdir=/tmp"
        return f"[Sun Dec  6 12:00:00 2026]\nlocalrule run:\n    jobid: {job}\n    resources: {resources}\n\n"

    def finished(job: int) -> str:
        return f"[Sun Dec  6 12:00:01 2026]\nFinished jobid: {job} (Rule: run)\n3 of 9 steps (33%) done\n\n"

    # 1 and 2 hold the GPU together; 3 (no gpu) runs beside them; 4 starts once 1 has finished
    log = block(1, True) + block(3, False) + block(2, True) + finished(1) + block(4, True) + finished(2) + finished(4)
    assert rehearsal.gpu_jobs_at_once(log) == 2
    one_at_a_time = block(1, True) + finished(1) + block(2, True) + finished(2) + block(3, False)
    assert rehearsal.gpu_jobs_at_once(one_at_a_time) == 1
    assert rehearsal.gpu_jobs_at_once("") == 0


@pytest.mark.slow
def test_the_rehearsal_writes_every_paper_target(tmp_path, root, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("llama_cpp")
    status = rehearsal.main(["--workdir", str(tmp_path / "rehearsal"), "--data", str(root)])
    out = capsys.readouterr()
    assert status == 0, out.err[-3000:]
    for target in [*load_study([PAPER]).report.targets, "report.html"]:
        assert (tmp_path / "rehearsal" / "results" / target).exists(), target
    assert "time per stage" in out.out and "peft train" in out.out and "anthropic messages (judge)" in out.out
    assert "b8642 is the vendored tree" in out.out and "b8642 (the vendored tree, build" in out.out
    # every student converted, quantised and load-checked by the build that serves it (issue 39)
    made = rehearsal.converted_by(tmp_path / "rehearsal" / "results")
    assert len(made) == 9 and all(m.startswith("b8642 (the vendored llama.cpp of llama-cpp-python ")
                                  for m in made.values()), made
    assert not (REPO / "results-rehearsal").exists() or os.environ.get("CI_KEEP")


def test_the_serving_records_name_the_builds_the_runs_served_on(tmp_path):
    def transcript(model: str, build: dict | None) -> None:
        path = tmp_path / "work" / model / "cta.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"serving": {"build": build}} if build is not None else {"serving": {"dialect": "azure"}}
        path.write_text(json.dumps({"case_id": "CTA-A-001", "meta": meta}) + "\n")   # a record, no run header

    vendored = {"version": "0.5.0-dev", "build": 1, "commit": "0c1e570", "tag": None, "source": "vendored"}
    transcript("qwen3.5-27b", {**vendored, "name": "b8642"})
    transcript("qwen3.5-9b", {**vendored, "name": "b8642"})
    transcript("qwen3.6-27b", {**vendored, "name": "b10398"})
    transcript("smollm2", {"version": "0.5.0-dev", "build": 1, "commit": "0c1e570", "tag": None})
    transcript("gpt-5.4-nano", None)
    # a transcript of today's format: the serving record is its run header's
    from metrobench.transcripts.records import RunHeader

    headed = tmp_path / "work" / "qwen3.5-2b" / "cta.jsonl"
    headed.parent.mkdir(parents=True)
    header = RunHeader("qwen3.5-2b", "cta", serving={"build": {**vendored, "name": "b8642"}})
    headed.write_text(header.to_json() + "\n" + json.dumps({"case_id": "CTA-A-001", "meta": {}}) + "\n")
    assert rehearsal.served_builds(tmp_path) == {"b10398 (the vendored tree, build 1)": 1,
                                                 "b8642 (the vendored tree, build 1)": 3, "default": 1}

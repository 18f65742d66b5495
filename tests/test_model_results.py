"""``metrobench results``: a workflow model's results.json, eval's file from the workflow's views and scores.

Two models of a small study run on two systems (a sample of 2 cases each): ``mine`` against the
OpenAI wire-format stand-in, priced in the config's ``prices``, and the scripted rule agent, not
priced; each scored, then its results file written and validated against the shipped schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from metrobench import layout
from metrobench.cli import main
from metrobench.commands.eval_results import EvalResults, shipped_schema
from metrobench.standins.openai_api import FakeOpenAI, chat_payload

DECLINED = chat_payload('{"outcome": "request_declined"}')
SYSTEMS = ("doha", "marta")


def test_a_workflow_models_results_file_with_its_cost_where_the_config_prices_it(root, tmp_path, capsys,
                                                                                   monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    results = tmp_path / "results"
    runs, scores = layout.runs_root("all", str(results)), layout.scores_root("all", root=str(results))
    with FakeOpenAI(lambda request: DECLINED) as api:
        study = {"results": str(results), "systems": list(SYSTEMS), "bench": {"partition": "all", "sample": 2},
                 "models": {"mine": {"provider": "openai", "base_url": f"{api.url}/v1", "api_key_env": "MY_KEY",
                                     "concurrency": 1}},
                 "prices": {"min*": {"input": 2, "output": 10, "read": "2026-03-01", "source": "https://x.test/p"}}}
        config = tmp_path / "study.yaml"
        config.write_text(yaml.safe_dump(study))
        for model in ("mine", "rule-agent"):
            views = []
            for system in SYSTEMS:
                view = layout.run_file(runs, model, system)
                assert main(["bench", "--data", str(root), "--config", str(config), "--model", model, "--system",
                             system, "--partition", "all", "--sample", "2", "--out", view,
                             "--work", layout.work_path(model, system, str(results))]) == 0   # as the workflow
                views.append(view)
            assert main(["score", "--data", str(root), *(x for v in views for x in ("--run", v)), "--out", scores,
                         "--no-verify"]) == 0
    made = {}
    for model in ("mine", "rule-agent"):
        out = layout.model_results(model, str(results))
        assert main(["results", "--config", str(config), "--model", model, "--runs", runs, "--scores", scores,
                     "--out", out]) == 0
        text = Path(out).read_text()
        made[model] = data = json.loads(text)
        jsonschema.validate(data, shipped_schema())
        EvalResults.model_validate(data)
        assert "sk-secret" not in text and text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
        assert data["selection"]["systems"] == ["marta", "doha"] and data["selection"]["sample"] == 2
        assert data["headline"]["cases"] == 4 and data["headline"]["systems"] == 2
        assert data["judge"]["kind"] == "none" and data["headline"]["composite_high"] is not None
        assert data["data"]["verified"] is False and data["model"]["name"] == model
    mine = made["mine"]
    assert mine["model"]["endpoint"] == api.url and mine["model"]["provider"] == "openai"
    tokens = mine["tokens"]
    assert tokens["input"] > 0
    usd = (tokens["input"] * 2 + tokens["output"] * 10) / 1_000_000
    assert mine["cost"] == {"usd": round(usd, 6), "usd_per_1k_cases": round(1000 * usd / 4, 4),
                            "prices_read": "2026-03-01", "source": "https://x.test/p"}
    assert made["rule-agent"]["cost"] is None                     # no price matches it: none, never guessed
    assert made["rule-agent"]["headline"]["tier1"] > mine["headline"]["tier1"]
    assert main(["results", "--config", str(config), "--model", "ghost", "--runs", runs, "--scores", scores,
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "not in the config's models" in capsys.readouterr().err

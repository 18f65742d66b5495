"""The run job declared once (issue 52): one RunJob for the rule, `metrobench run --view` and the plan."""

from __future__ import annotations

import pytest

from metrobench.cli import main
from metrobench.commands.eval_results import workflow_config
from metrobench.errors import MetrobenchError
from metrobench.run_job import run_config, run_job
from metrobench.study import load_study


def test_a_students_settings_are_one_value_for_its_run_its_plan_and_its_results():
    # a paper-recipe student is served with the thinking of its recipe's template (Qwen3.5's: it thinks);
    # before the RunJob, the plan and results.json took student_serving's thinking instead, so they named
    # another fingerprint than the run recorded
    study = load_study(["config/config.yaml"])
    job = run_job(study, "27b-peft-s42", "doha", "holdout")
    assert job.gguf == "results/peft/27b/seed42/model-Q4_K_M.gguf"
    assert job.inputs() == {"split": "results/partition.json", "gguf": job.gguf}
    assert job.config.thinking is True and job.gpu == 1
    assert run_config(study, "27b-peft-s42").fingerprint() == job.fingerprint()
    assert workflow_config(study, "27b-peft-s42").fingerprint() == job.fingerprint()


def test_the_views_narrow_and_the_train_view_teaches():
    study = load_study(["config/demo.yaml"])
    held, whole, train = (run_job(study, "rule-agent", "doha", view) for view in ("holdout", "all", "train"))
    assert (held.sample, whole.sample, train.sample) == (1, None, None)     # bench.sample: the benchmark's views
    assert held.work == whole.work == "results/work/rule-agent/doha.jsonl"
    assert train.work == "results/work/rule-agent/doha.teacher.jsonl"
    assert (held.config.script_mode, train.config.script_mode) == ("baseline", "teacher")
    assert held.gpu == 0 and held.inputs() == {"split": "results/partition.json"}
    # a model that teaches as itself shares its benchmark row's work transcript
    lm = run_job(study, "smollm2-135m", "doha", "train")
    assert lm.work == run_job(study, "smollm2-135m", "doha", "holdout").work
    assert lm.fingerprint() == run_job(study, "smollm2-135m", "doha", "holdout").fingerprint()


def test_a_name_the_config_does_not_run_is_one_error():
    study = load_study(["config/demo.yaml"])
    with pytest.raises(MetrobenchError, match="model 'smollm2-135m-rep9' is no run of the config"):
        run_job(study, "smollm2-135m-rep9", "doha", "holdout")


@pytest.mark.parametrize("extra, flag", [(["--out", "x.jsonl"], "--out"), (["--sample", "3"], "--sample"),
                                         (["--temperature", "0.5"], "--temperature"),
                                         (["--partition", "train"], "--partition")])
def test_the_study_job_refuses_flags_it_declares_itself(extra, flag, capsys):
    code = main(["run", "--config", "config/demo.yaml", "--model", "rule-agent", "--system", "doha",
                 "--view", "holdout", *extra])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"metrobench: error: {flag}: a study's run job (--view) takes it from the config; drop it"]


def test_a_view_the_study_has_no_job_for_is_one_error(capsys):
    assert main(["run", "--config", "config/demo.yaml", "--model", "rule-agent", "--system", "doha",
                 "--view", "everything"]) != 0
    assert "metrobench: error: view 'everything' is no view of a run job" in capsys.readouterr().err

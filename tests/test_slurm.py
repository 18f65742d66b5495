"""profiles/slurm: its plan, and a small workflow run through it on a real one-node SLURM cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import slurm_cluster
from test_workflow import BIN, ENV, REPO, workflow_copy

pytest.importorskip("snakemake_executor_plugin_slurm")
from snakemake_executor_plugin_slurm.partitions import read_partition_file  # noqa: E402

TARGETS = ("results/partition.json", "results/table2.csv", "results/table2.md")
PROBE = "results/slurm/gpu_probe.txt"


def snakemake(cwd: Path, *args: str, env: dict[str, str] = ENV, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def small_workflow(tmp: Path, root: Path) -> Path:
    """The workflow's files, with tests/data/workflow-small.yaml (the rule baseline) on two systems as small.yaml."""
    tmp.mkdir()
    cwd = workflow_copy(tmp)
    config = yaml.safe_load((REPO / "tests" / "data" / "workflow-small.yaml").read_text())
    config["data"]["path"] = str(root)
    config["systems"] = ["marta", "bart"]
    (cwd / "small.yaml").write_text(yaml.safe_dump(config))
    return cwd


@pytest.mark.slow
def test_slurm_plan_has_no_gpu_cap_and_leaves_partitions_to_the_gpu_resource(tmp_path):
    cwd = workflow_copy(tmp_path)
    code = ("from snakemake.cli import parse_args\n"
            "for profile in ('slurm', 'default'):\n"
            "    _, args = parse_args(['-n', '--workflow-profile', f'profiles/{profile}'])\n"
            "    print(profile, args.executor, sorted(args.resources))\n")
    parsed = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True)
    assert parsed.stdout.splitlines() == ["slurm slurm []", "default None ['gpu']"], parsed.stderr
    plan = snakemake(cwd, "-n", "--workflow-profile", "profiles/slurm", "results/table4.csv")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "Using workflow specific profile profiles/slurm for setting" in plan.stderr   # not default
    train = plan.stdout.split("rule train:", 1)[1].split("\n\n", 1)[0]
    assert "gpu=1" in train and "mem_mb=96000" in train and "slurm_partition" not in train
    merge = plan.stdout.split("rule merge:", 1)[1].split("\n\n", 1)[0]
    assert "mem_mb=" in merge and "mem_mb=128000" not in merge   # the rule's own memory
    partitions = read_partition_file(cwd / "profiles" / "slurm" / "partitions.yaml")   # as the plugin reads it
    assert [(p.name, p.limits.max_gpu) for p in partitions] == [("cpu", 0), ("gpu", 8)]


def slurm_jobs(env: dict[str, str]) -> list[dict[str, str]]:
    """Every job slurmctld still holds (finished ones for MinJobAge, an hour), as `scontrol show job` fields."""
    done = subprocess.run(["scontrol", "--oneliner", "show", "job"], env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    return [dict(re.findall(r"([\w/:]+)=(\S*)", line)) for line in done.stdout.splitlines() if line.strip()]


@pytest.mark.slow
def test_small_workflow_through_profiles_slurm_equals_a_local_run(tmp_path, root):
    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    local = small_workflow(tmp_path / "local", root)
    done = snakemake(local, "--configfile", "small.yaml", "--cores", "2", *TARGETS)
    assert done.returncode == 0, done.stderr[-3000:]
    cwd = small_workflow(tmp_path / "slurm", root)
    shutil.copy(REPO / "tests" / "data" / "Snakefile.slurm", cwd / "Snakefile.slurm")
    with slurm_cluster.single_node_cluster() as cluster:
        # no .venv/bin on PATH: the workflow puts the metrobench beside its Python on its jobs' PATH
        env = dict(cluster.env, PATH=os.pathsep.join(p for p in cluster.env["PATH"].split(os.pathsep)
                                                     if p and Path(p) != BIN))
        done = snakemake(
            cwd, "--snakefile", "Snakefile.slurm", "--workflow-profile", "profiles/slurm", "--configfile", "small.yaml",
            # this cluster has no accounting database (slurmdbd), so no sacct
            "--slurm-status-command", "squeue",
            "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "5",
            *TARGETS, PROBE, env=env)
        jobs = slurm_jobs(env)
        logs = slurm_cluster.log_tail(cluster.root)
    assert done.returncode == 0, done.stderr[-4000:] + logs
    assert "Provided remote nodes: 50" in done.stderr
    assert "Provided resources" not in done.stderr        # no global cap such as the local gpu=1
    # verify_data, partition, 2 rule-agent runs, their scores, table 2 and the GPU probe: a SLURM job each
    assert sorted(job["Comment"] for job in jobs) == [   # the executor names each job after its rule
        "rule_gpu_probe", "rule_partition", "rule_run_wildcards_all_rule-agent_bart",
        "rule_run_wildcards_all_rule-agent_marta", "rule_score_wildcards_tier2_all_rule-agent",
        "rule_table_wildcards_table2", "rule_verify_data"], jobs
    assert {job["JobState"] for job in jobs} == {"COMPLETED"}, jobs
    probe_job = next(job for job in jobs if job["Comment"] == "rule_gpu_probe")
    assert probe_job["Partition"] == "gpu" and probe_job["TresPerJob"] == "gres:gpu:1", probe_job
    others = [job for job in jobs if job is not probe_job]
    assert all(job["Partition"] == "cpu" and "TresPerJob" not in job for job in others), others
    probe = (cwd / PROBE).read_text()   # written inside the job: the GPU SLURM gave it
    assert f"SLURM_JOB_ID={probe_job['JobId']}\n" in probe and "CUDA_VISIBLE_DEVICES=0\n" in probe, probe
    assert "TresPerJob=gres:gpu:1" in probe, probe
    for target in TARGETS:
        assert (cwd / target).read_bytes() == (local / target).read_bytes(), target
    assert "| Rule-based baseline |" in (cwd / "results" / "table2.md").read_text()

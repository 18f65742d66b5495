"""The Snakemake workflow: lint, formatting, the paper plan's job counts, and a small real run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import workflow_copy

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def snakemake(cwd: Path, *args: str, timeout: int = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=ENV if env is None else env,
                          capture_output=True, text=True, timeout=timeout)


#: The environment of a fresh clone: no METROBENCH_DATA (the workflow then looks beside the checkout).
BARE = {k: v for k, v in ENV.items() if k != "METROBENCH_DATA"}


def job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)
            if m.group(1) != "total"}


@pytest.mark.slow
def test_lint_and_snakefmt():
    lint = snakemake(REPO, "--lint")
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    files = ["Snakefile", *sorted(str(p.relative_to(REPO)) for p in (REPO / "workflow" / "rules").glob("*.smk"))]
    fmt = subprocess.run([str(BIN / "snakefmt"), "--check", *files], cwd=REPO, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr


@pytest.mark.slow
def test_paper_plan_for_table4(tmp_path):
    cwd = workflow_copy(tmp_path)
    plan = snakemake(cwd, "-n", "results/table4.csv", env=BARE)
    assert plan.returncode == 0, plan.stderr[-2000:]
    counts = job_counts(plan.stdout)
    assert counts == {
        "fetch_data": 1, "verify_data": 1, "partition": 1,           # data.path empty: the pinned clone
        "fetch_gguf": 9, "fetch_base": 4,                 # 4 bases, 35B teacher, 4 published students; 4 bases
        "trainset": 1, "train": 9, "merge": 9, "gguf": 9, "quantize": 9,  # 4 sizes x seeds 42/43, + 2B seed 44
        # views: 2 teachers x 6 systems, train; (4 bases + 9 students + 4 published) x 6 systems, held out;
        # each model's view scored Tier 1 only, its six systems in one job
        "run": 12 + 102, "score": 2 + 17,
        "table": 1,
    }
    assert "../shared" not in plan.stdout
    trainset = snakemake(cwd, "-n", "-p", "results/teacher/dataset.jsonl").stdout
    assert "--view train" in trainset
    assert all(f"--recipe peft/recipes/{size}.yaml" in trainset for size in ("2b", "4b", "9b", "27b"))


@pytest.mark.slow
def test_the_workflow_finds_the_data_as_the_commands_do_and_says_which(tmp_path, root):
    # issue 44: data.path, else $METROBENCH_DATA, else the shared copy beside the checkout, else the
    # pinned clone (fetched); the plan's first line says which (metrobench.data.root.locate_root)
    (tmp_path / "checkout").mkdir()
    cwd = workflow_copy(tmp_path / "checkout")
    target = ("-n", "-p", "results/partition.json")

    bare = snakemake(cwd, *target, env=BARE)
    assert bare.returncode == 0, bare.stderr[-2000:]
    assert "benchmark data: results/data/metrollm-bench (the pinned clone, fetched at data.commit)" in bare.stderr
    assert job_counts(bare.stdout)["fetch_data"] == 1

    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "metrollm-bench").symlink_to(root)
    shared = snakemake(cwd, *target, env=BARE)
    assert "benchmark data: ../shared/metrollm-bench (from the shared copy ../shared/metrollm-bench)" \
        in shared.stderr, shared.stderr[-2000:]
    assert "fetch_data" not in job_counts(shared.stdout)
    assert "metrobench verify-data --data ../shared/metrollm-bench" in shared.stdout

    env = snakemake(cwd, *target, env=dict(BARE, METROBENCH_DATA=str(root)))
    assert f"benchmark data: {root} (from METROBENCH_DATA)" in env.stderr
    assert f"metrobench verify-data --data {root} " in env.stdout and "fetch_data" not in job_counts(env.stdout)

    configured = snakemake(cwd, *target, "--config", f"data={{path: {root}}}", env=dict(BARE, METROBENCH_DATA="/x"))
    assert f"benchmark data: {root} (from data.path)" in configured.stderr


@pytest.mark.slow
def test_a_failed_jobs_log_is_printed_under_its_error(tmp_path, root):
    # issue 44: show-failed-logs in the profiles; the log's own error line reaches the terminal
    for profile in ("default", "slurm"):
        assert yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())["show-failed-logs"] is True
    cwd = workflow_copy(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    for sub in ("cases", "data/systems", "data/splits"):
        (bad / sub).mkdir(parents=True)                 # laid out as a root, no file in it: verify-data fails
    run = snakemake(cwd, "results/data/verified.json", "--cores", "1", "--config", f"data={{path: {bad}}}",
                    timeout=300)
    assert run.returncode != 0
    assert "metrobench: error:" in run.stderr and "logs/data/verify.log" in run.stderr, run.stderr[-3000:]


def test_both_profiles_keep_going_past_a_failed_job():
    # issue 49, item 3: one failed run job must not end a two-day `snakemake results/table4.csv`
    for profile in ("default", "slurm"):
        settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
        assert settings["keep-going"] is True and settings["show-failed-logs"] is True, profile


@pytest.mark.slow
def test_the_workstation_profile_runs_what_does_not_depend_on_a_failed_job(tmp_path):
    # issue 49, item 3: on one core the failing job runs first (priority); the other still runs after it
    # under profiles/default, and does not without the profile (Snakemake's own default: stop)
    import shutil

    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: "failed.txt", "independent.txt"\n\n'
        'rule failing:\n    output: "failed.txt"\n    priority: 10\n    shell: "exit 3"\n\n'
        'rule independent:\n    output: "independent.txt"\n    shell: "touch {output}"\n')
    bare = snakemake(tmp_path, "--cores", "1", "--workflow-profile", "none", timeout=120)
    assert bare.returncode != 0 and not (tmp_path / "independent.txt").exists(), bare.stderr[-2000:]
    kept = snakemake(tmp_path, "--cores", "1", timeout=120)
    assert kept.returncode != 0, kept.stderr[-2000:]
    assert (tmp_path / "independent.txt").exists() and not (tmp_path / "failed.txt").exists(), kept.stderr[-2000:]


@pytest.mark.slow
def test_a_config_without_report_targets_builds_table2_and_the_viewer(tmp_path, root):
    # issue 44: report.targets unset -> `rule all` (and so `snakemake --report`) has Table 2 and the viewer
    cwd = workflow_copy(tmp_path)
    (cwd / "mine.yaml").write_text(yaml.safe_dump({
        "data": {"path": str(root)}, "scoring": {"judge": "none"},
        "leaderboard": [{"model": "rule-agent", "reference": True}]}))
    plan = snakemake(cwd, "-n", "--configfile", "mine.yaml")
    assert plan.returncode == 0, plan.stderr[-2000:]
    counts = job_counts(plan.stdout)
    assert counts["table"] == 1 and counts["view"] == 1 and counts["all"] == 1, counts
    assert "output: results/table2.csv" in plan.stdout


@pytest.mark.parametrize("scoring, said", [
    ({"judge": "openai", "judge_model": "qwen-judge", "judge_url": "http://127.0.0.1:9/v1"},
     "Scoring judge: openai, model qwen-judge at http://127.0.0.1:9/v1."),
    ({"judge": "anthropic"}, "Scoring judge: anthropic, model claude-haiku-4-5-20251001 at the provider's API."),
    ({"judge": "none"}, "Scoring judge: none, the judge was off"),
])
def test_the_reports_text_names_the_judge_its_model_and_url(scoring, said):
    # issue 44: "Scoring judge: openai (with none, ...)" read as if the judge were off
    import re

    import jinja2
    from docutils.core import publish_parts

    class Snakemake:   # what snakemake.report renders the description with
        config = {"scoring": scoring}

    text = jinja2.Environment().from_string((REPO / "workflow" / "report" / "workflow.rst").read_text())
    html = publish_parts(text.render(snakemake=Snakemake), writer_name="html")["html_body"]
    plain = " ".join(re.sub(r"<[^>]+>", "", html).split())
    assert said in plain.replace("&quot;", '"').replace("&#x27;", "'"), plain
    assert ("judge was off" in plain) == (scoring["judge"] == "none")


@pytest.mark.slow
def test_config_overrides_reach_the_tables(tmp_path):
    """`snakemake --config ...` changes what `metrobench tables` reads; an override reruns only the paper layer."""
    cwd = workflow_copy(tmp_path)
    args = ("results/table2.csv", "-n", "-p", "--forceall", "--configfile", "config/demo.yaml")
    plain = snakemake(cwd, *args)
    # (Snakemake hands nested --config values over as strings: a label is the honest probe)
    changed = snakemake(cwd, *args, "--config",
                        "leaderboard=[{model: rule-agent, label: Rules only, licence: '-', vendor: '-'}]")
    assert plain.returncode == changed.returncode == 0, changed.stderr[-2000:]

    def tables_config(plan: str) -> tuple[str, dict]:
        command = next(line for line in plan.splitlines() if "metrobench tables" in line)
        flags = re.findall(r"--config (\S+)", command)
        assert len(flags) == 1, command
        return flags[0], yaml.safe_load((cwd / flags[0]).read_text())

    path, study = tables_config(plain.stdout)
    new_path, new_study = tables_config(changed.stdout)
    assert [row["label"] for row in study["leaderboard"]][-1] == "Rule-based baseline"
    given = {"model": "rule-agent", "label": "Rules only", "licence": "-", "vendor": "-"}
    [row] = new_study["leaderboard"]     # the override, as given
    assert {key: row[key] for key in given} == given
    assert new_study["stats"] == study["stats"] and path != new_path
    # the run jobs read the study as this run sees it (issue 52: `run --view`); their command is a derived
    # param, so an edited label never restarts them (the settings fingerprint is what reruns a run)
    runs = [line for line in plain.stdout.splitlines() if "metrobench run " in line]
    assert runs and all(re.search(r"--config \S+ --model \S+ --system \S+ --view ", line) for line in runs)


def test_a_misspelt_config_key_stops_the_plan_with_one_line(tmp_path):
    """The study model is the config's only check: a misspelt key meets one `metrobench: error:` line naming
    the file and the key, not a schema validator's report first."""
    cwd = workflow_copy(tmp_path)
    (cwd / "typo.yaml").write_text("scoring: {judge_modle: claude-haiku-4-5-20251001}\n")
    plan = snakemake(cwd, "-n", "--configfile", "config/demo.yaml", "typo.yaml", timeout=120)
    assert plan.returncode != 0
    lines = [line for line in plan.stderr.splitlines() if line.strip() and not line.startswith("Using workflow")]
    assert lines == [f"metrobench: error: {cwd / 'typo.yaml'}: field scoring.judge_modle: Extra inputs are not "
                     "permitted"], plan.stderr


COMMIT = "0123456789abcdef0123456789abcdef01234567"
TABLE4_GGUFS = ["models/Qwen3.5-2B-Q8_0.gguf", "models/Qwen3.5-4B-Q6_K.gguf", "models/Qwen3.5-9B-Q5_K_M.gguf",
                "models/Qwen3.5-27B-Q4_K_M.gguf", "models/Qwen3.5-35B-A3B-Q4_K_M.gguf"] + [  # 4 bases, a teacher
    f"models/Qwen3.5-{s}-metro-v24-Q4_K_M.gguf" for s in ("2B", "4B", "9B", "27B")]      # the published students
TABLE4_BASES = [f"Qwen/Qwen3.5-{s}" for s in ("2B", "4B", "9B", "27B")]


def write_lock(cwd: Path, ggufs: list[str], bases: list[str]) -> None:
    """A lock for these entries of config/config.yaml, as `metrobench lock` writes it (no hub needed)."""
    study = yaml.safe_load((cwd / "config" / "config.yaml").read_text())["downloads"]
    lock = {"version": 1,
            "gguf": {p: {**study["gguf"][p], "revision": "main", "commit": COMMIT, "size": 4, "sha256": "a" * 64}
                     for p in ggufs},
            "bases": {r: {"revision": "main", "commit": COMMIT,
                          "ignore_patterns": ["*vision*", "*visual*", "*mtp*", "*.gguf", "*.pth", "*.bin", "*.pt"],
                          "files": {"config.json": {"size": 2, "git_sha1": "b" * 40}}} for r in bases}}
    (cwd / "config" / "models.lock.yaml").write_text(yaml.safe_dump(lock))


@pytest.mark.slow
def test_table4_plan_fetches_every_model_by_name_and_needs_no_judge(tmp_path):
    """Table 4 is Tier 1 only (no judge, no key); every GGUF it serves and every base it trains is a fetch job,
    with or without a lock; a lock pins the train jobs' base revision."""
    cwd = workflow_copy(tmp_path)
    env = {k: v for k, v in ENV.items() if k != "ANTHROPIC_API_KEY"}
    for locked in (False, True):
        if locked:
            write_lock(cwd, TABLE4_GGUFS, TABLE4_BASES)
        plan = subprocess.run([sys.executable, "-m", "snakemake", "results/table4.csv", "-n", "-p"], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=600)
        assert plan.returncode == 0, plan.stderr[-2000:]
        counts = job_counts(plan.stdout)
        assert counts["fetch_gguf"] == 9 and counts["fetch_base"] == 4
        assert counts["score"] == 2 + 17 and all("tiers=tier1" in block for block in plan.stdout.split("\n\n")
                                                   if "rule score:" in block)
        commands = [ln for ln in plan.stdout.splitlines() if "metrobench " in ln]
        assert not any("anthropic" in c or "ANTHROPIC" in c for c in commands)
        assert all("--judge none" in c for c in commands if "metrobench score" in c)
        assert sum("metrobench train" in c and f"--revision {COMMIT}" in c for c in commands) == (9 if locked else 0)
        assert sorted(re.findall(r"fetch-model --lock config/models.lock.yaml --gguf (\S+)", plan.stdout)) == \
            sorted(TABLE4_GGUFS)
        assert "../shared" not in plan.stdout
        # a base GGUF is an input of its bench jobs, so it is fetched before the server starts
        bench = plan.stdout.split("rule run:", 1)[1].split("\n\n", 1)[0]
        assert re.search(r"input: .*models/Qwen3\.5-", bench)
        # the card travels with each run, which holds its fetched GGUF's header against it (issue 49, item 6)
        model, system, view = re.search(r"--model (\S+) --system (\S+) --view (\S+)", bench).groups()
        from metrobench.run_job import run_job
        from metrobench.study import load_study

        card = run_job(load_study([str(cwd / "config/config.yaml")]), model, system, view).card
        assert card.model_dump() == {"name": "RTX 5090", "memory_gib": 32.0, "headroom_gib": 1.0, "enforce": True}


@pytest.mark.slow
def test_plans_stop_at_once_on_a_served_file_with_no_source_or_a_stale_lock(tmp_path):
    cwd = workflow_copy(tmp_path)
    (cwd / "extra.yaml").write_text(yaml.safe_dump(
        {"models": {"mine": {"provider": "llama_cpp", "serving": {"gguf": "models/mine.gguf"}}}}))
    bad = snakemake(cwd, "results/table4.csv", "-n", "--configfile", "config/config.yaml", "extra.yaml")
    assert bad.returncode != 0
    errors = [ln for ln in bad.stderr.splitlines() if "error" in ln.lower()]
    assert errors == ["metrobench: error: model mine serves models/mine.gguf, which is not there and not among the "
                      "config's downloads: place the file there (then `metrobench lock --adopt models/mine.gguf`), "
                      "or name its hub repo and file under downloads.gguf[models/mine.gguf] and run "
                      "`metrobench lock`"], bad.stderr
    (cwd / "models").mkdir()
    (cwd / "models" / "mine.gguf").write_bytes(b"GGUF")          # placed by hand: plans
    assert snakemake(cwd, "results/runs/all/mine/marta.jsonl", "-n", "--configfile", "config/config.yaml",
                     "extra.yaml").returncode == 0

    write_lock(cwd, TABLE4_GGUFS[:1], [])
    lock = yaml.safe_load((cwd / "config" / "models.lock.yaml").read_text())
    lock["gguf"][TABLE4_GGUFS[0]]["repo"] = "someone/else"
    (cwd / "config" / "models.lock.yaml").write_text(yaml.safe_dump(lock))
    stale = snakemake(cwd, "results/table4.csv", "-n")
    assert stale.returncode != 0
    assert [ln for ln in stale.stderr.splitlines() if "error" in ln.lower()] == [
        f"metrobench: error: config/models.lock.yaml: downloads.gguf[{TABLE4_GGUFS[0]}]: the config asks for "
        f"unsloth/Qwen3.5-2B-GGUF/Qwen3.5-2B-Q8_0.gguf at main, the lock holds someone/else/Qwen3.5-2B-Q8_0.gguf "
        f"at main; run `metrobench lock --update {TABLE4_GGUFS[0]}`"]


@pytest.mark.slow
def test_a_run_without_a_lock_stops_in_its_fetch_jobs_and_with_one_fetches_and_verifies(tmp_path, root):
    """A real run: unlocked, the fetch jobs (first, by priority) stop it before any model job; locked against
    the hub stand-in, the fetch job downloads and verifies the GGUF."""
    import hashlib

    from metrobench.standins.hf_hub import FakeHub

    cwd = workflow_copy(tmp_path)
    data = ("--config", f"data={{path: {root}}}")
    run = snakemake(cwd, "results/table4.csv", "--cores", "2", *data)
    assert run.returncode != 0
    output = run.stdout + run.stderr
    # whichever fetch job the scheduler starts first: a GGUF (models/...) or a student's base (Qwen/...)
    assert re.search(r"metrobench: error: (models/|Qwen/)Qwen3\.5-\S*: not in config/models\.lock\.yaml yet: "
                     r"run `metrobench lock`", output), output[-3000:]
    started = set(re.findall(r"^rule (\w+):", output, re.M))
    assert started <= {"fetch_gguf", "fetch_base", "verify_data", "partition"}, started
    assert not list(cwd.glob("models/*.gguf"))

    gguf = b"GGUF" + bytes(range(256)) * 16
    with FakeHub({"unsloth/Qwen3.5-2B-GGUF": {"Qwen3.5-2B-Q8_0.gguf": gguf}}, COMMIT) as hub:
        hub_env = dict(ENV, HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1")
        only = cwd / "only.yaml"
        only.write_text(yaml.safe_dump({"downloads": {"gguf": {TABLE4_GGUFS[0]: {
            "repo": "unsloth/Qwen3.5-2B-GGUF", "file": "Qwen3.5-2B-Q8_0.gguf"}}}}))
        # lock the one entry the stand-in holds (the config's other entries stay unlocked)
        locked = subprocess.run([sys.executable, "-m", "metrobench", "lock", "--config", str(only)], cwd=cwd,
                                env=hub_env, capture_output=True, text=True, timeout=120)
        assert locked.returncode == 0, locked.stderr
        fetched = subprocess.run([sys.executable, "-m", "snakemake", TABLE4_GGUFS[0], "--cores", "1"], cwd=cwd,
                                 env=hub_env, capture_output=True, text=True, timeout=300)
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    assert hashlib.sha256((cwd / TABLE4_GGUFS[0]).read_bytes()).hexdigest() == hashlib.sha256(gguf).hexdigest()


def _bench_resources(cwd: Path, model: str) -> str:
    out = snakemake(cwd, "-n", f"results/runs/all/{model}/marta.jsonl").stdout
    return next(ln for ln in out.split("rule run:", 1)[1].splitlines() if "resources:" in ln)


@pytest.mark.slow
def test_gpu_only_for_local_models_and_merge_memory(tmp_path):
    cwd = workflow_copy(tmp_path)
    assert "gpu=0" in _bench_resources(cwd, "mistral-small-2603")   # a hosted API: never serialised
    assert "gpu=1" in _bench_resources(cwd, "qwen3.5-2b")
    merge = snakemake(cwd, "-n", "results/peft/27b/seed42/merged").stdout.split("rule merge", 1)[1]
    assert "mem_mb=6475" in merge.split("\n\n", 1)[0]   # the streaming merge (benchmarks/merge_memory.py)
    # peft_temporary is accepted by the schema (a dry run does not show temp() marks)
    assert snakemake(cwd, "-n", "results/peft/2b/seed42/model-Q4_K_M.gguf",
                     "--config", "peft_temporary=True").returncode == 0


@pytest.mark.slow
def test_training_leaves_cores_free_and_hosted_teachers_hold_no_gpu(tmp_path):
    cwd = workflow_copy(tmp_path)
    (cwd / "hosted.yaml").write_text(yaml.safe_dump({"teachers": ["mistral-small-2603", "qwen3.5-27b"]}))
    plan = snakemake(cwd, "-n", "--cores", "8", "results/peft/2b/seed42/adapter", "--configfile",
                     "config/config.yaml", "hosted.yaml").stdout
    teacher_jobs = [block for block in plan.split("\n\n") if "rule run:" in block and "partition=train" in block]
    hosted = [b for b in teacher_jobs if "model=mistral-small-2603" in b]
    local = [b for b in teacher_jobs if "model=qwen3.5-27b" in b]
    assert hosted and all("gpu=0" in b for b in hosted)
    assert local and all("gpu=1" in b for b in local)
    train = plan.split("rule train:", 1)[1].split("\n\n", 1)[0]
    assert "threads: 4" in train and "OMP_NUM_THREADS=4" in plan


#: The small workflow's results folder: not the default, so that every path must follow the config's `results`.
OUT = "out"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, root) -> Path:
    """The small real workflow (tests/data/workflow-small.yaml) under results: out, run once for the tests below."""
    cwd = workflow_copy(tmp_path_factory.mktemp("small"))
    config = yaml.safe_load((REPO / "tests" / "data" / "workflow-small.yaml").read_text())
    config["data"]["path"] = str(root)
    config["results"] = OUT
    (cwd / "small.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(cwd, "--configfile", "small.yaml", "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd


@pytest.mark.slow
def test_every_result_lands_in_the_configured_results_folder(small_run):
    cwd = small_run
    assert not (cwd / "results").exists()
    made = {p.relative_to(cwd / OUT).parts[0] for p in (cwd / OUT).rglob("*") if p.is_file()}
    assert {"runs", "scores", "summary", "benchmarks", "partition.json", "table2.csv", "errata.csv"} <= made
    assert (cwd / OUT / "runs" / "all" / "rule-agent" / "marta.jsonl").is_file()


@pytest.mark.slow
def test_small_real_run_builds_tables_and_figures(small_run):
    cwd = small_run
    table2 = pd.read_csv(cwd / OUT / "table2.csv")
    row = table2.iloc[0]
    assert (row["model"], row["tier1"], row["composite"], row["judged"]) == (
        "Rule-based baseline", 84.6, 67.02, False)
    # the rule baseline is the paper's reference line: below the ranks, never ranked
    assert pd.isna(row["rank"]) and row["reference"] and not row["ranked"] and row["normal_endings_pct"] == 100.0
    errata = pd.read_csv(cwd / OUT / "errata.csv")
    assert errata.loc[errata["erratum"] == "advisory-fare", "holdout_tier1"].iloc[0] == 86.32
    for figure in ("figure2", "figure3", "figure4"):
        assert (cwd / OUT / f"{figure}.png").stat().st_size > 1000
    assert (cwd / OUT / "table2.md").read_text().startswith("| Rank | Model | Licence | Vendor | Comp. | Tier 1 |")
    again = snakemake(cwd, "--configfile", "small.yaml", "--cores", "2", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    # Forcing one run reruns its chain (its score, and what reads the scores), nothing else:
    # the same mechanism as --forcerun results/peft/4b/seed43/adapter on the paper config.
    forced = snakemake(cwd, "--configfile", "small.yaml", "-n", "--forcerun", f"{OUT}/runs/all/rule-agent/marta.jsonl")
    counts = job_counts(forced.stdout)
    assert counts["run"] == 1 and counts["score"] == 1 and counts["errata_table"] == 1
    assert "partition" not in counts and "verify_data" not in counts


@pytest.mark.slow
def test_statistics_tables_with_no_models_listed_read_every_benchmarked_models_scores(small_run):
    """Issue 42: empty stats.bootstrap_models / category_models mean every benchmarked model on both
    sides: the rules give Table 9, the protocol and category tables that model's scores (and runs) as
    inputs, so a changed score rebuilds them (they were planned with no score at all before)."""
    cwd = small_run
    config = yaml.safe_load((cwd / "small.yaml").read_text())
    del config["stats"]["bootstrap_models"], config["stats"]["category_models"]
    (cwd / "empty-lists.yaml").write_text(yaml.safe_dump(config))
    targets = [f"{OUT}/table9.csv", f"{OUT}/categories.csv", f"{OUT}/protocol.csv"]
    forced = snakemake(cwd, *targets, "--configfile", "empty-lists.yaml", "-n", "--forcerun",
                       f"{OUT}/runs/all/rule-agent/marta.jsonl")
    assert forced.returncode == 0, forced.stderr[-3000:]
    counts = job_counts(forced.stdout)
    assert counts == {"run": 1, "score": 1, "table": 3}, forced.stdout
    jobs = [job for job in re.split(r"\n(?=(?:local)?rule \w+:)", forced.stdout) if job.startswith("rule table:")]
    reasons = {re.search(r"wildcards: table=(\w+)", job).group(1): re.search(r"reason: (.*)", job).group(1)
               for job in jobs}
    assert reasons["table9"].startswith("Input files updated by another job: ") and \
        f"{OUT}/scores/tier2/all/model=rule-agent/system=marta/part.parquet" in reasons["table9"], reasons
    assert f"{OUT}/scores/tier2/all/model=rule-agent/system=marta/part.parquet" in reasons["categories"], reasons
    assert f"{OUT}/runs/all/rule-agent/marta.jsonl" in reasons["protocol"], reasons


@pytest.mark.slow
def test_report_holds_every_table_and_figure_and_the_viewer_builds(small_run):
    cwd = small_run
    made = sorted(p.name for p in (cwd / OUT).iterdir() if p.suffix in (".csv", ".md", ".png"))
    assert len(made) == 11, made  # table2/9/categories/errata as CSV + Markdown, figures 2-4
    for name in ("report.zip", "report.html"):
        done = snakemake(cwd, "--configfile", "small.yaml", "--report", f"{OUT}/{name}")
        assert done.returncode == 0, done.stderr[-3000:]
    with zipfile.ZipFile(cwd / OUT / "report.zip") as archive:
        names = archive.namelist()
        page = archive.read("report/report.html").decode()
    assert sorted(Path(n).name for n in names if "/data/raw/" in n) == made
    for caption in ("Table 2: leaderboard", "Table 9: bootstrap intervals", "Per-category scores",
                    "Scoring errata", "Figure 2: leaderboard", "Figure 3: category heatmap",
                    "Figure 4: the rule", "can a language model run a transit ticket kiosk"):
        assert caption in page, caption
    assert (cwd / OUT / "report.html").stat().st_size > 100_000
    view = snakemake(cwd, "--configfile", "small.yaml", "--cores", "2", f"{OUT}/view")
    assert view.returncode == 0, view.stderr[-3000:]
    index = (cwd / OUT / "view" / "index.html").read_text()
    assert "models/rule-agent.html" in index
    assert len(list((cwd / OUT / "view" / "cases" / "rule-agent").glob("*.html"))) == 955


@pytest.mark.slow
def test_an_edited_model_setting_reruns_its_runs_and_keeps_the_old_transcript(tmp_path, root):
    """Issue 41: max_tokens edited in the config reruns the model's run job (its settings param changed),
    which sets the old work transcript aside (not deleted, not refused) and runs afresh."""
    sys.path.insert(0, str(REPO / "tests"))
    from metrobench.standins.openai_api import FakeOpenAI, chat_payload

    cwd = workflow_copy(tmp_path)
    target = f"{OUT}/runs/holdout/fake/marta.jsonl"
    work = cwd / OUT / "work" / "fake" / "marta.jsonl"
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        def configure(max_tokens: int) -> None:
            config = yaml.safe_load((REPO / "tests" / "data" / "workflow-small.yaml").read_text())
            config["data"]["path"] = str(root)
            config["results"] = OUT
            config["bench"] = {"sample": 2}
            config["models"] = {"fake": {"provider": "llama_cpp", "base_url": f"{api.url}/v1",
                                         "max_tokens": max_tokens, "concurrency": 1, "retries": 1}}
            (cwd / "small.yaml").write_text(yaml.safe_dump(config))

        configure(512)
        first = snakemake(cwd, "--configfile", "small.yaml", "--cores", "1", target)
        assert first.returncode == 0, first.stderr[-3000:]
        paid = work.read_bytes()
        same = snakemake(cwd, "--configfile", "small.yaml", "--cores", "1", "-n", target)
        assert "Nothing to be done" in same.stdout + same.stderr
        configure(256)
        plan = snakemake(cwd, "--configfile", "small.yaml", "--cores", "1", "-n", target)
        assert job_counts(plan.stdout) == {"run": 1} and "Params have changed" in plan.stdout, plan.stdout
        again = snakemake(cwd, "--configfile", "small.yaml", "--cores", "1", target)
        assert again.returncode == 0, again.stderr[-3000:]
    [aside] = [p for p in work.parent.glob("marta.*.jsonl")]
    assert aside.read_bytes() == paid
    header, *records = (json.loads(line) for line in work.read_text().splitlines())
    assert header["header"]["settings"]["max_tokens"] == 256   # the new transcript begins with its own header
    assert len(records) == 2 and {r["meta"]["settings"]["max_tokens"] for r in records} == {256}
    log = (cwd / "logs" / "runs" / "holdout" / "fake" / "marta.log").read_text()
    assert f"set aside as {aside.relative_to(cwd)}" in log

"""`metrobench doctor`: its verdicts on real configs, fake executables and the environment."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from metrobench import doctor
from metrobench.cli import main
from metrobench.commands.common import load_study

REPO = Path(__file__).resolve().parents[1]


def _exe(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_features_are_read_from_llama_cpps_system_info_line():
    line = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | AMX_INT8 = 1 |"
    assert doctor.compiled_features(line) == ["SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "AMX_INT8"]
    assert [f for f in doctor.compiled_features(line) if f in doctor.RISKY_FEATURES] == ["AMX_INT8"]


def test_demo_config_needs_llama_cpp_and_cpu_training_but_no_key_or_gpu(monkeypatch):
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/demo.yaml"]))
    assert needs.local_models == ["smollm2-135m", "students"]
    assert needs.students and not needs.gpu_training
    assert needs.key_envs == {} and needs.ggufs == {}


def test_paper_config_needs_the_hosted_keys_the_judge_key_a_gpu_and_its_ggufs(monkeypatch):
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/config.yaml"]))
    assert needs.key_envs["ANTHROPIC_API_KEY"] == "the judge"
    assert {"MISTRAL_API_KEY", "AZURE_OPENAI_API_KEY"} <= set(needs.key_envs)
    assert needs.gpu_training
    assert needs.ggufs["qwen3.5-27b"] == "models/Qwen3.5-27B-Q4_K_M.gguf"
    checks = doctor.check_models(needs, REPO)
    assert checks[0].status == "FAIL" and "GGUFs missing" in checks[0].detail


def test_keys_are_named_never_shown(monkeypatch):
    needs = doctor.StudyNeeds(key_envs={"ANTHROPIC_API_KEY": "the judge", "MISTRAL_API_KEY": "model m"})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    checks = doctor.check_keys(needs)
    assert [(c.status, c.detail) for c in checks] == [
        ("ok", "ANTHROPIC_API_KEY is set (needed by the judge)"),
        ("FAIL", "MISTRAL_API_KEY is not set (needed by model m)")]
    assert not any("very-secret" in c.line() for c in checks)


def test_llama_server_verdicts_for_a_working_a_missing_and_a_crashing_binary(tmp_path):
    needs = doctor.StudyNeeds(local_models=["m"])
    good = _exe(tmp_path / "good-server", 'echo "version: 4242 (abcdef0)"; echo "built with cc" >&2')
    crash = _exe(tmp_path / "sigill-server", "kill -ILL $$")
    from metrobench.agents import serving

    original = serving.find_llama_server
    try:
        serving.find_llama_server = lambda binary=None: good
        ok = doctor.check_llama_server(needs)
        serving.find_llama_server = lambda binary=None: crash
        crashed = doctor.check_llama_server(needs)
    finally:
        serving.find_llama_server = original
    assert ok.status == "ok" and ok.detail == f"{good} (version: 4242 (abcdef0))"
    assert crashed.status == "FAIL" and "SIGILL" in crashed.detail


def test_no_llama_server_fails_only_when_the_study_serves_models(monkeypatch, tmp_path):
    from metrobench.agents import serving

    monkeypatch.setattr(serving, "installed_llama_server", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = doctor.check_llama_server(doctor.StudyNeeds(local_models=["m"]))
    assert missing.status == "FAIL" and "make install" in missing.detail
    assert doctor.check_llama_server(doctor.StudyNeeds()).status == "warn"


@pytest.mark.slow
def test_doctor_exits_1_and_says_why_when_the_judge_key_is_missing(monkeypatch, tmp_path, root, capsys):
    config = tmp_path / "study.yaml"
    config.write_text("scoring: {judge: anthropic}\n")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["doctor", "--data", str(root), "--config", str(config), "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  api key            ANTHROPIC_API_KEY is not set (needed by the judge)" in out
    assert "files match the pinned digests" in out
    assert out.rstrip().endswith("1 problem(s): the configured study cannot run here")


def test_doctor_fails_on_data_with_a_wrong_digest(broken_root, tmp_path, capsys):
    bad = broken_root()
    case_file = next((bad / "cases").rglob("*.json"))
    case_file.write_text(case_file.read_text() + " ")
    config = tmp_path / "study.yaml"
    config.write_text("systems: [marta]\n")
    assert main(["doctor", "--data", str(bad), "--config", str(config), "--results", str(tmp_path)]) == 1
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("FAIL  data"))
    assert case_file.name in line


def test_a_config_that_does_not_validate_is_one_failure_and_the_other_checks_still_run(tmp_path, root, capsys):
    config = tmp_path / "study.yaml"
    config.write_text("systems: [marta]\nscoring: {judg: none}\n")
    assert main(["doctor", "--data", str(root), "--config", str(config), "--results", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL  config") and f"{config}: field scoring.judg" in lines[0]
    assert any(line.startswith("ok    data") for line in lines)
    assert lines[-1] == "1 problem(s): the configured study cannot run here"


def test_doctor_passes_on_this_machine_with_the_demo_config(monkeypatch, root, capsys):
    pytest.importorskip("llama_cpp")
    monkeypatch.chdir(REPO)
    assert main(["doctor", "--data", str(root), "--config", "config/demo.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line[6:24].strip() for line in lines[:-1]]
    assert names == ["config", "python", "packages", "llama.cpp build", "llama-server", "torch", "cuda",
                     "bitsandbytes", "memory", "disk", "api keys", "python stack", "training path",
                     "training memory", "data"]
    assert lines[-1] == "ready: the configured study can run here"


def test_a_native_build_is_run_for_one_token_and_a_sigill_is_a_failure(monkeypatch):
    pytest.importorskip("llama_cpp")
    amx = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | AMX_TILE = 1 |"
    monkeypatch.setattr(doctor.llama, "_system_info", lambda: (amx, ""))
    ran = []
    monkeypatch.setattr(doctor.llama, "_one_token", lambda: ran.append(1) or doctor.llama._died(-4, ""))
    checks = doctor.check_llama_cpp(doctor.StudyNeeds(local_models=["m"]))
    assert ran == [1]
    assert checks[-1].status == "FAIL" and checks[-1].name == "llama.cpp run"
    assert "AVX512 AMX_INT8 AMX_TILE compiled in" in checks[-1].detail and "SIGILL" in checks[-1].detail
    monkeypatch.setattr(doctor.llama, "_one_token", lambda: None)
    survived = doctor.check_llama_cpp(doctor.StudyNeeds(local_models=["m"]))[-1]
    assert survived.status == "warn" and "native build" in survived.detail
    portable = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 |"
    monkeypatch.setattr(doctor.llama, "_system_info", lambda: (portable, ""))
    assert [c.name for c in doctor.check_llama_cpp(doctor.StudyNeeds())] == ["llama.cpp build"]


def test_a_library_that_dies_on_load_is_a_failure(monkeypatch):
    pytest.importorskip("llama_cpp")
    monkeypatch.setattr(doctor.llama, "_system_info", lambda: (None, doctor.llama._died(-4, "")))
    [check] = doctor.check_llama_cpp(doctor.StudyNeeds())
    assert check.status == "FAIL" and "SIGILL" in check.detail and "install-llama-cpp.sh" in check.detail


def test_an_unlocked_or_stale_models_lock_is_one_line_naming_the_command(tmp_path, monkeypatch):
    import yaml

    from metrobench.hub.lock import BASE_IGNORE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"downloads": {
        "gguf": {"models/a.gguf": {"repo": "acme/a-GGUF", "file": "a.gguf"}}, "bases": {"acme/base": {}}}}))
    study = load_study([str(tmp_path / "study.yaml")])
    [check] = doctor.check_lock(study)
    assert (check.status, check.detail) == ("FAIL", "2 of 2 model downloads not locked yet (models/a.gguf, ...): "
                                            "run `metrobench lock` first (hub metadata only, no download), then "
                                            "commit config/models.lock.yaml")
    (tmp_path / "config").mkdir()
    lock = {"gguf": {"models/a.gguf": {"repo": "acme/other-GGUF", "file": "a.gguf", "revision": "main",
                                       "commit": "0" * 40, "size": 1, "sha256": "a" * 64}}}
    (tmp_path / "config" / "models.lock.yaml").write_text(yaml.safe_dump(lock))
    [check] = doctor.check_lock(study)
    assert check.status == "FAIL" and check.detail.endswith("run `metrobench lock --update models/a.gguf`")
    lock["gguf"]["models/a.gguf"]["repo"] = "acme/a-GGUF"
    lock["bases"] = {"acme/base": {"revision": "main", "commit": "1" * 40, "ignore_patterns": BASE_IGNORE,
                                   "files": {}}}
    (tmp_path / "config" / "models.lock.yaml").write_text(yaml.safe_dump(lock))
    assert [c.status for c in doctor.check_lock(study)] == ["ok"]
    # a GGUF that the workflow will fetch is not a missing model file
    needs = doctor.read_needs(load_study([str(tmp_path / "study.yaml")]))
    needs.ggufs = {"m": "models/a.gguf"}
    assert [c.status for c in doctor.check_models(needs, tmp_path, study)] == ["ok"]


def test_disk_and_memory_are_checked_against_the_paper_plan(monkeypatch, tmp_path):
    """The paper's students (2/4/9/27B, 3+2+2+2 seeds): bases, merged folders and GGUFs against free disk."""
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/config.yaml"]))
    assert needs.student_billions == {"2b": 2.0, "4b": 4.0, "9b": 9.0, "27b": 27.0}
    assert needs.peft_temporary                 # the paper config's choice; first as it would be without it
    needs.peft_temporary = False
    ram, disk = doctor.plan_needs(needs)
    # the merge streams one shard at a time: the largest student needs a shard and its adapter
    assert ram == pytest.approx(5.0 + 0.012 * 27)
    # each base cached once (2 GB a billion), and per seed a Q4_K_M (0.6), a merged folder and an f16 (2 + 2)
    seeds_b = 2 * 3 + 4 * 2 + 9 * 2 + 27 * 2
    assert disk == pytest.approx(2.0 * 42 + 0.6 * seeds_b + 4.0 * seeds_b + doctor.MIN_FREE_GB)
    low = doctor.check_disk(tmp_path, needs, free_disk=lambda path: 120.0)
    assert low.status == "warn" and low.name == "disk"
    assert low.detail == (f"120 GB free under {tmp_path}; the plan writes up to {disk:.0f} GB: "
                          f"{disk - 120:.0f} GB short (peft_temporary: true deletes merged folders and "
                          "f16 GGUFs once quantised)")
    needs.peft_temporary = True
    _, temporary = doctor.plan_needs(needs)
    assert temporary == pytest.approx(2.0 * 42 + 0.6 * seeds_b + 4.0 * 27 + doctor.MIN_FREE_GB)
    assert doctor.check_disk(tmp_path, needs, free_disk=lambda path: 1000.0).status == "ok"
    short = doctor.check_memory(needs, free_ram=lambda: 4.0)
    assert short.status == "warn"
    assert short.detail == "4.0 GB available; the students' merge needs 5.3 GB: 1.3 GB short"
    assert doctor.check_memory(needs, free_ram=lambda: 64.0).status == "ok"


def test_a_demo_sized_plan_needs_only_the_floor(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/demo.yaml"]))
    assert doctor.plan_needs(needs) == (0.0, doctor.MIN_FREE_GB)
    assert doctor.check_disk(tmp_path, needs, free_disk=lambda path: 25.0).status == "ok"
    low = doctor.check_disk(tmp_path, needs, free_disk=lambda path: 5.0)
    assert low.status == "warn" and low.detail.endswith(": 15 GB short (peft_temporary: true deletes merged "
                                                        "folders and f16 GGUFs once quantised)")


def test_the_stack_check_reads_this_checkouts_constraints_by_default():
    """The package is a checkout's: check_stack finds constraints/stack.txt without being told where."""
    checks = doctor.check_stack(version_of=lambda name: "0.0.0")
    assert checks and all("not a checkout" not in c.detail for c in checks)
    assert str(REPO / "constraints" / "stack.txt") in checks[0].detail

"""Benchmark data: checksums, validation, and clear errors for malformed copies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.data import SYSTEMS, load_cases, load_system, resolve_root, verify_checksums
from metrobench.errors import DataError, MetrobenchError

from conftest import dump_json, load_json


def test_pinned_files_verify(root):
    checked = verify_checksums(root)
    assert "cases/marta_cases.json" in checked and "data/splits/v23_holdout75_seed42.json" in checked
    assert len(checked) == 73


def test_all_cases_validate_with_reference_counts(bench):
    counts = {s: len(bench.cases(s)) for s in SYSTEMS}
    assert counts == {"marta": 156, "doha": 156, "bart": 157, "taipei": 167, "cta": 157, "beijing": 162}
    stations = sum(len(bench.system(s).stations) for s in SYSTEMS)
    assert stations == 788


def test_modified_file_named_in_checksum_error(broken_root):
    root = broken_root()
    path = root / "data" / "systems" / "bart" / "fares.json"
    path.write_text(path.read_text().replace("2.15", "2.25", 1))
    with pytest.raises(DataError) as info:
        verify_checksums(root)
    assert "data/systems/bart/fares.json" in str(info.value)
    assert "differs from the pinned release" in str(info.value)


def test_bad_json_names_file_line_and_column(broken_root):
    root = broken_root()
    path = root / "cases" / "marta_cases.json"
    path.write_text(path.read_text()[:500])
    with pytest.raises(DataError) as info:
        load_cases(root, "marta")
    assert "marta_cases.json" in str(info.value) and "invalid JSON at line" in str(info.value)


def test_missing_field_names_case_and_field(broken_root):
    root = broken_root()
    path = root / "cases" / "marta_cases.json"
    cases = load_json(path)
    del cases[3]["ground_truth"]["expected_outcome"]
    dump_json(path, cases)
    with pytest.raises(DataError) as info:
        load_cases(root, "marta")
    err = info.value
    assert err.case_id == cases[3]["id"] and err.field == "ground_truth.expected_outcome"
    assert "Field required" in str(err) and "marta_cases.json" in str(err)


def test_unknown_station_id_in_case(broken_root):
    root = broken_root()
    path = root / "cases" / "marta_cases.json"
    cases = load_json(path)
    cases[0]["events"][1]["station_id"] = "MARTA-XX"
    dump_json(path, cases)
    with pytest.raises(DataError) as info:
        load_cases(root, "marta")
    assert info.value.case_id == "MARTA-A-001"
    assert info.value.field == "events[1].station_id"
    assert "unknown station id 'MARTA-XX'" in str(info.value)


def test_duplicate_case_id(broken_root):
    root = broken_root()
    path = root / "cases" / "doha_cases.json"
    cases = load_json(path)
    cases[10]["id"] = cases[2]["id"]
    dump_json(path, cases)
    with pytest.raises(DataError) as info:
        load_cases(root, "doha")
    assert info.value.case_id == cases[2]["id"] and info.value.field == "id"
    assert "duplicate case id (also at position 2)" in str(info.value)


def test_wrong_type_in_system_file_names_station(broken_root):
    root = broken_root()
    path = root / "data" / "systems" / "cta" / "stations.json"
    stations = load_json(path)
    stations[5]["accessibility"]["elevator"] = "maybe"
    dump_json(path, stations)
    with pytest.raises(DataError) as info:
        load_system(root, "cta")
    assert f"[5] (id {stations[5]['id']}).accessibility.elevator" in str(info.value)


def test_unknown_event_type_rejected(broken_root):
    root = broken_root()
    path = root / "cases" / "bart_cases.json"
    cases = load_json(path)
    cases[0]["events"][0]["type"] = "teleport"
    dump_json(path, cases)
    with pytest.raises(DataError) as info:
        load_cases(root, "bart")
    assert info.value.case_id == "BART-A-001" and info.value.field.startswith("events[0]")


def test_cli_reports_user_error_without_traceback(broken_root, capsys):
    root = broken_root()
    path = root / "cases" / "cta_cases.json"
    cases = load_json(path)
    cases[1]["id"] = cases[0]["id"]
    dump_json(path, cases)
    assert main(["verify-data", "--data", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("metrobench: error: ") and "Traceback" not in err
    assert "differs from the pinned release" in err  # checksums are checked before parsing


def test_resolve_root_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("METROBENCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)                      # no shared copy nor clone beside it
    with pytest.raises(MetrobenchError, match="METROBENCH_DATA .*nor is there ../shared/metrollm-bench or "
                                              ".data/metrollm-bench here"):
        resolve_root(None)
    with pytest.raises(MetrobenchError, match="has no cases/ folder"):
        resolve_root(tmp_path)
    monkeypatch.setenv("METROBENCH_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(MetrobenchError, match="from METROBENCH_DATA"):
        resolve_root(None)


def test_the_root_is_data_then_the_environment_then_the_shared_copy_then_the_pinned_clone(
        tmp_path, monkeypatch, root):
    # issue 44: the order the commands and the workflow (workflow/rules/common.smk) share
    from metrobench.data.root import locate_root

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("METROBENCH_DATA", raising=False)
    assert locate_root(None) == (None, "")
    (checkout / ".data").mkdir()
    (checkout / ".data" / "metrollm-bench").symlink_to(root)
    assert locate_root(None) == (Path(".data/metrollm-bench"), "the pinned clone .data/metrollm-bench")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "metrollm-bench").symlink_to(root)
    assert locate_root(None) == (Path("../shared/metrollm-bench"), "the shared copy ../shared/metrollm-bench")
    assert resolve_root(None) == Path("../shared/metrollm-bench")
    monkeypatch.setenv("METROBENCH_DATA", str(root))
    assert locate_root(None) == (root, "METROBENCH_DATA")
    assert locate_root("elsewhere", source="data.path") == (Path("elsewhere"), "data.path")
    (tmp_path / "shared" / "metrollm-bench").unlink()
    (tmp_path / "shared" / "metrollm-bench").mkdir()                # not a benchmark root: passed over
    monkeypatch.delenv("METROBENCH_DATA")
    assert locate_root(None)[0] == Path(".data/metrollm-bench")


def test_cli_module_entry_point(root):
    proc = subprocess.run([sys.executable, "-m", "metrobench", "verify-data", "--data", str(root)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "955 cases of 6 systems validate" in proc.stdout


def test_libyaml_and_pure_python_yaml_read_every_benchmark_file_alike(root):
    """read_yaml uses libyaml's parser where PyYAML has it (start-up speed); the values must not change."""
    import yaml

    from metrobench.data.loader import _SAFE_LOADER

    assert _SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    files = sorted(root.rglob("*.yaml"))
    assert len(files) >= 12
    for path in files:
        text = path.read_text(encoding="utf-8")
        fast, slow = yaml.load(text, Loader=_SAFE_LOADER), yaml.load(text, Loader=yaml.SafeLoader)
        assert fast == slow and repr(fast) == repr(slow), path

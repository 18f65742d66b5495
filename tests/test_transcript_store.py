"""Transcripts (JSONL and the reference's result JSON) and the Parquet score store."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from scoring_helpers import PLAN_CALLS, gt_answer

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.scoring.store import FILE_SCHEMA, read_scores
from metrobench.transcripts.records import CaseRecord, TranscriptWriter, read_run


def test_writer_appends_and_repairs_an_interrupted_last_line(tmp_path):
    path = tmp_path / "runs" / "m" / "marta.jsonl"
    with TranscriptWriter(path) as writer:
        writer.write(CaseRecord(case_id="MARTA-A-001", model="m", system="marta"))
    with open(path, "a") as fh:
        fh.write('{"case_id": "MARTA-A-002", "respo')  # killed mid-write
    run = read_run(path)
    assert [r.case_id for r in run.records] == ["MARTA-A-001"]
    with TranscriptWriter(path) as writer:
        writer.write(CaseRecord(case_id="MARTA-A-002", model="m", system="marta"))
    run = read_run(path)
    assert [r.case_id for r in run.records] == ["MARTA-A-001", "MARTA-A-002"]
    assert (run.model, run.system, run.kind) == ("m", "marta", "transcript")


def test_malformed_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"case_id": "MARTA-A-001"}\n{oops\n{"case_id": "MARTA-A-002"}\n')
    with pytest.raises(MetrobenchError, match=r"bad.jsonl: line 2: not valid JSON"):
        read_run(path)
    path.write_text('{"case_id": "MARTA-A-001"}\n{"case": 1}\n')
    with pytest.raises(MetrobenchError, match=r"line 2: field case_id"):
        read_run(path)
    with pytest.raises(MetrobenchError, match="no such run file"):
        read_run(tmp_path / "absent.jsonl")


def test_reference_result_files_are_rescored(tmp_path, root, bench, capsys):
    answer = gt_answer(bench, "CTA-A-001")
    reference = {
        "metadata": {"harness_version": "0.4.0", "llm_model": "qwen3.5", "system": "cta"},
        "model": "qwen3.5-27b", "system": "cta", "cases_total": 2,
        "results": [
            {"case_id": "CTA-A-001", "response": answer, "tool_calls_made": PLAN_CALLS,
             "raw_content": json.dumps(answer), "reasoning_content": "", "messages": [],
             "ttft_ms": 812.5, "e2e_ms": 4200.1, "input_tokens": 9000, "output_tokens": 300,
             "api_rounds": 3, "error": None, "empty_rounds": 0, "truncated": False},
            {"case_id": "CTA-A-002", "response": None, "tool_calls_made": [], "raw_content": "",
             "error": "Exhausted 20 tool call rounds"},
        ],
    }
    path = tmp_path / "qwen_20260101_000000.json"
    path.write_text(json.dumps(reference, indent=2))
    run = read_run(path)
    assert run.kind == "reference" and run.model == "qwen3.5-27b" and run.system == "cta"
    assert main(["score", "--data", str(root), "--run", str(path), "--out", str(tmp_path / "s")]) == 0
    assert "155 missing" in capsys.readouterr().out
    frame = pd.read_parquet(tmp_path / "s")
    first = frame[(frame["case_id"] == "CTA-A-001") & frame["score"].notna()]
    assert (first["score"] == first["max"]).all()
    assert frame.loc[frame["case_id"] == "CTA-A-002", "error"].iloc[0] == "Exhausted 20 tool call rounds"


def test_parquet_layout_schema_and_atomic_writes(tmp_path, root):
    run = tmp_path / "bart.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "bart", "--model", "baseline-1.0",
                 "--out", str(run)]) == 0
    out = tmp_path / "scores"
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(out)]) == 0
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["model=baseline-1.0/system=bart/part.parquet"]  # no temporary files left
    stored = pq.read_schema(out / files[0])
    assert stored.names == FILE_SCHEMA.names
    assert [str(f.type) for f in stored] == [str(f.type) for f in FILE_SCHEMA]
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["case_id", "category", "partition", "component", "tier", "score",
                                   "max", "judged", "reason", "error", "model", "system"]
    assert set(frame["system"].astype(str)) == {"bart"} and frame["case_id"].nunique() == 157
    assert read_scores(out).num_rows == len(frame)
    tier = frame.groupby("component")["tier"].first()
    assert tier["cultural_accuracy"] == 1 and tier["framebook_conformance"] == 2
    judged = frame[frame["score"].isna()]
    assert set(judged["component"]) <= {"advisory_content_correct", "policy_acknowledged",
                                        "temporal_accuracy", "safety_response_quality",
                                        "no_data_fabrication", "scope_adherence"}
    assert not judged["judged"].any()


def test_bad_names_and_empty_folders_are_clear_errors(tmp_path, root, capsys):
    run = tmp_path / "x.jsonl"
    run.write_text(json.dumps({"case_id": "DOHA-A-001"}) + "\n")
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s")]) == 2
    assert "names no model; give one with --model" in capsys.readouterr().err
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"),
                 "--model", "a/b"]) == 2
    assert "cannot name a folder" in capsys.readouterr().err
    assert main(["summary", "--scores", str(tmp_path / "nothing")]) == 2
    assert "no scores folder" in capsys.readouterr().err
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"),
                 "--model", "m", "--errata", "typo"]) == 2
    assert "unknown erratum typo" in capsys.readouterr().err


def test_a_run_is_scored_only_under_the_model_its_records_name(tmp_path, root, capsys):
    # issue 41, class 2: a repeat's transcript scored under --model m became m's scores
    run = tmp_path / "runs" / "m-rep2" / "doha.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text("".join(CaseRecord(case_id=f"DOHA-A-00{i}", model="m-rep2", system="doha").to_json() + "\n"
                           for i in (1, 2)))
    out = tmp_path / "scores"
    capsys.readouterr()
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(out), "--judge", "none",
                 "--model", "m"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"metrobench: error: {run}: the run's records are of model m-rep2, not m (--model); score it under its "
        "own name, or omit --model"]
    assert not out.exists()
    for name in (["--model", "m-rep2"], []):   # its own name, given or read from the records
        assert main(["score", "--data", str(root), "--run", str(run), "--out", str(out), "--judge", "none",
                     *name]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["model=m-rep2"]
    # without --model, records of two models in one file are refused, not scored under the first one's name
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(run.read_text() + CaseRecord(case_id="DOHA-A-003", model="m", system="doha").to_json() + "\n")
    capsys.readouterr()
    assert main(["score", "--data", str(root), "--run", str(mixed), "--out", str(out), "--judge", "none"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"metrobench: error: {mixed}: the run's records are of 2 models (m, m-rep2); a run file holds one "
        "model's cases: write each model's to its own file"]
    # records that name no model (a foreign transcript's) take --model as given
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"case_id": "DOHA-A-001"}) + "\n")
    assert main(["score", "--data", str(root), "--run", str(bare), "--out", str(out), "--judge", "none",
                 "--model", "m"]) == 0


# --- the run header (issue 42 item 4) -----------------------------------------------------------------


def test_readers_take_model_and_system_from_the_header_and_never_count_it(tmp_path):
    from metrobench.transcripts.records import RunHeader, iter_transcript, read_header
    from metrobench.transcripts.selection import run_system

    path = tmp_path / "t.jsonl"
    header = RunHeader(model="m", system="doha", config="abc")
    # records that name neither (and a case id whose prefix is another system's): the header decides
    with TranscriptWriter(path, header) as writer:
        writer.write(CaseRecord(case_id="MARTA-A-001"))
    with TranscriptWriter(path, header) as writer:      # a writer on a begun file adds no second header
        writer.write(CaseRecord(case_id="MARTA-A-002"))
    assert path.read_text().splitlines()[0] == header.to_json()
    assert sum('"header"' in line for line in path.read_text().splitlines()) == 1
    run = read_run(path)
    assert (run.model, run.system, run.header) == ("m", "doha", header)
    assert [(r.case_id, r.model, r.system) for r in run.records] == [("MARTA-A-001", "m", "doha"),
                                                                       ("MARTA-A-002", "m", "doha")]
    assert [r.case_id for r in iter_transcript(path)] == ["MARTA-A-001", "MARTA-A-002"]
    assert read_header(path) == header and run_system(run, None) == "doha"
    with pytest.raises(MetrobenchError, match="--system marta, but its header says doha"):
        run_system(run, "marta")


def test_the_old_vote_reads_a_header_less_transcript(tmp_path):
    from metrobench.transcripts.records import read_header
    from metrobench.transcripts.selection import run_system

    path = tmp_path / "old.jsonl"
    path.write_text('{"case_id": "DOHA-A-001"}\n{"case_id": "DOHA-A-002", "model": "m"}\n')
    run = read_run(path)
    assert run.header is None and read_header(path) is None
    assert (run.model, run.system, run_system(run, None)) == ("m", "", "doha")   # the case ids' prefix


def test_a_header_out_of_place_or_disagreeing_is_one_error_naming_file_line_and_field(tmp_path):
    from metrobench.transcripts.records import RunHeader

    header = RunHeader(model="m", system="marta").to_json()
    record = CaseRecord(case_id="MARTA-A-001", model="m", system="marta").to_json()
    cases = {
        "joined.jsonl": (f"{header}\n{record}\n{header}\n", r"joined.jsonl: line 3: field header: .*first line only"),
        "other.jsonl": (f"{header}\n" + record.replace('"system":"marta"', '"system":"doha"') + "\n",
                        r"other.jsonl: case MARTA-A-001: field system: 'doha', but the header says 'marta'"),
        "future.jsonl": (header.replace('"format":2', '"format":99') + "\n",
                         r"future.jsonl: line 1: field header.format: 99 is not a transcript format"),
        "nameless.jsonl": ('{"header": {"model": "m", "format": 2}}\n',
                           r"nameless.jsonl: line 1: field header.system: must be a non-empty string"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(MetrobenchError, match=message):
            read_run(tmp_path / name)


def test_a_run_scores_the_same_with_its_header_as_without(root, tmp_path):
    """The header is no case: the scorer reads the same records, model and system from either file."""
    from metrobench.transcripts.records import RunHeader, write_transcript

    records = [CaseRecord(case_id="MARTA-A-001", model="m", system="marta", error="x"),
               CaseRecord(case_id="MARTA-A-002", model="m", system="marta", response={"outcome": "request_declined"})]
    with_header, without = tmp_path / "a" / "marta.jsonl", tmp_path / "b" / "marta.jsonl"
    write_transcript(with_header, records, RunHeader(model="m", system="marta"))
    write_transcript(without, records)
    tables = []
    for path, out in ((with_header, tmp_path / "sa"), (without, tmp_path / "sb")):
        assert main(["score", "--data", str(root), "--run", str(path), "--out", str(out), "--no-verify"]) == 0
        tables.append(pq.read_table(out / "model=m" / "system=marta" / "part.parquet").to_pylist())
    assert tables[0] == tables[1] and {r["case_id"] for r in tables[0]} >= {"MARTA-A-001", "MARTA-A-002"}

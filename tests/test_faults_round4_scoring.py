"""Issue 51 (faults, fourth round), the scoring side: items 5, 4, 10, 18, 16 and 13.

Each test names its item; each failed on the code before its fix (checked by running it there).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.data.models import case_digest, case_hash
from metrobench.errors import MetrobenchError
from metrobench.scoring.scorer import Scorer
from metrobench.transcripts.records import CaseRecord, write_transcript

from scoring_helpers import gt_answer

CASE = "MARTA-A-001"


# --------------------------------------------------------------------------- item 5: the case digest


def _record(bench, case_id: str, sha: str | None) -> CaseRecord:
    record = CaseRecord(case_id=case_id, model="m", system="marta", response=gt_answer(bench, case_id))
    if sha is not None:
        record.meta["case_sha"] = sha
    return record


def test_case_hash_lives_below_the_runner_and_the_scorer_and_is_the_runners(bench):
    from metrobench.agents.runner.run import case_hash as runner_hash

    case = bench.case(CASE)
    assert runner_hash is case_hash and case_hash(case) == case_digest(case.raw)
    assert case_digest(case.raw) == __import__("hashlib").sha256(
        json.dumps(case.raw, sort_keys=True).encode()).hexdigest()[:16]


def test_a_record_run_on_an_edited_case_is_refused_naming_the_case_and_the_count(bench):
    case = bench.case(CASE)
    edited = copy.deepcopy(case.raw)
    edited["title"] = edited["title"] + " (edited)"
    record = _record(bench, CASE, case_digest(case.raw))   # run on the pinned case, scored against the edit
    with pytest.raises(MetrobenchError) as err:
        Scorer(bench.system("marta")).score([edited], [record], source="t.jsonl")
    message = str(err.value)
    assert message.startswith("t.jsonl: 1 record (MARTA-A-001) was run on other case data") and "\n" not in message


def test_score_refuses_records_whose_digest_differs_and_counts_them(bench, root, tmp_path, capsys):
    ids = [c.id for c in bench.cases("marta")[:3]]
    records = [_record(bench, ids[0], "0" * 16), _record(bench, ids[1], "f" * 16),
               _record(bench, ids[2], case_hash(bench.case(ids[2])))]
    run = tmp_path / "t.jsonl"
    write_transcript(run, records)
    code = main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "scores")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "scores").exists()
    [line] = [ln for ln in err.splitlines() if ln.startswith("metrobench: error:")]
    assert f"2 records ({ids[0]}, {ids[1]})" in line and str(run) in line and "Traceback" not in err


def test_records_with_a_matching_digest_or_none_score_as_before(bench, root, tmp_path, capsys):
    ids = [c.id for c in bench.cases("marta")[:2]]
    records = [_record(bench, ids[0], case_hash(bench.case(ids[0]))), _record(bench, ids[1], None)]
    run = tmp_path / "t.jsonl"
    write_transcript(run, records)
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "scores"),
                 "--model", "m"]) == 0
    assert "scored" in capsys.readouterr().out


def test_a_superseded_record_of_other_case_data_is_not_refused(bench):
    # --rerun-changed appends the new record after the old: only the scored (latest) record counts
    case = bench.case(CASE)
    old, new = _record(bench, CASE, "0" * 16), _record(bench, CASE, case_hash(case))
    [score] = Scorer(bench.system("marta")).score([case.raw], [old, new], warn=lambda _: None)
    assert score.error is None


def test_run_verifies_the_data_as_eval_does(broken_root, tmp_path, capsys):
    root = broken_root()
    cases = root / "cases" / "marta_cases.json"
    data = json.loads(cases.read_text())
    data[0]["title"] += " (edited)"
    cases.write_text(json.dumps(data))
    out = tmp_path / "t.jsonl"
    code = main(["run", "--data", str(root), "--system", "marta", "--model", "m", "--provider", "openai",
                 "--base-url", "http://127.0.0.1:9/v1", "--cases", CASE, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "marta_cases.json" in err and "SHA-256" in err and not out.exists()

"""A run records which cases it covers; ``score`` takes them from there (metrobench.transcripts.selection)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.data.partition import load_split, select_cases
from metrobench.data.selection import Selection, split_digest
from metrobench.transcripts.selection import recorded_selection
from metrobench.transcripts.records import read_run, write_transcript


def _rows(scores_dir, model="rule-agent", system="marta"):
    table = pq.read_table(scores_dir / f"model={model}" / f"system={system}" / "part.parquet")
    return sorted(set(table.column("case_id").to_pylist())), table


def test_score_takes_the_cases_the_run_recorded(root, bench, tmp_path, capsys):
    run = tmp_path / "marta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--partition", "holdout",
                 "--out", str(run), "--no-verify"]) == 0
    holdout = [c.id for c in select_cases(bench, "marta", "holdout", load_split(bench))]
    records = read_run(run).records
    assert [r.case_id for r in records] == holdout
    assert {json.dumps(r.meta["selection"], sort_keys=True) for r in records} == {json.dumps(
        {"system": "marta", "partition": "holdout", "split": split_digest(load_split(bench)), "sample": None,
         "cases": None, "limit": None}, sort_keys=True)}
    # no --partition: the run's (held-out) cases, not all 160 of marta
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"), "--no-verify"]) == 0
    ids, _ = _rows(tmp_path / "s")
    assert ids == sorted(holdout) and len(ids) < len(bench.cases("marta"))
    capsys.readouterr()
    # an explicit other partition wins, with a warning; the cases the run lacks score as failures
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "t"),
                 "--partition", "train", "--no-verify"]) == 0
    captured = capsys.readouterr()
    assert "warning: " in captured.err and "covers partition holdout; scoring it as --partition train" in captured.err
    train = [c.id for c in select_cases(bench, "marta", "train", load_split(bench))]
    assert _rows(tmp_path / "t")[0] == sorted(train) and f"{len(train)} missing" in captured.out
    # another split is refused: the run's partition labels would be wrong
    other = tmp_path / "other-split.json"
    assert main(["partition", "--data", str(root), "--seed", "7", "--out", str(other)]) == 0
    capsys.readouterr()
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "t"),
                 "--split", str(other), "--no-verify"]) == 2
    assert "another split" in capsys.readouterr().err


def test_a_recorded_sample_scores_its_missing_case_and_nothing_else(root, bench, tmp_path, capsys):
    partitions = load_split(bench)
    selection = Selection(system="bart", partition="holdout", split=split_digest(partitions), sample=3)
    cases = selection.resolve(bench, partitions)
    assert len(cases) == 3
    full = tmp_path / "full.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "bart", "--partition", "holdout",
                 "--out", str(full), "--no-verify"]) == 0
    by_id = {r.case_id: r for r in read_run(full).records}
    run = tmp_path / "sample.jsonl"
    kept = [by_id[c.id] for c in cases[:2]]
    for record in kept:
        record.meta["selection"] = selection.to_meta()
    write_transcript(run, kept)
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"), "--no-verify"]) == 0
    assert "1 missing (scored as failures)" in capsys.readouterr().out
    ids, table = _rows(tmp_path / "s", system="bart")
    assert ids == sorted(c.id for c in cases)
    errors = {cid: err for cid, err in zip(table.column("case_id").to_pylist(), table.column("error").to_pylist())}
    assert errors[cases[2].id] and not errors[cases[0].id]


def test_records_of_two_selections_are_refused(bench, tmp_path):
    partitions = load_split(bench)
    run_path = tmp_path / "mixed.jsonl"
    from metrobench.transcripts.records import CaseRecord

    first = CaseRecord(case_id="MARTA-A-001", model="m", system="marta")
    second = CaseRecord(case_id="MARTA-A-002", model="m", system="marta")
    first.meta["selection"] = Selection("marta", "all", split_digest(partitions)).to_meta()
    second.meta["selection"] = Selection("marta", "all", split_digest(partitions), limit=1).to_meta()
    write_transcript(run_path, [first, second])
    with pytest.raises(MetrobenchError, match="2 different case selections"):
        recorded_selection(read_run(run_path))


def test_the_rule_agent_runs_a_sample_as_bench_does(root, bench, tmp_path):
    """The benchmark's sampled views (config bench.sample) run the rule agent on the same cases as the models."""
    partitions = load_split(bench)
    run = tmp_path / "cta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "cta", "--partition", "holdout", "--sample", "2",
                 "--out", str(run), "--no-verify"]) == 0
    expected = Selection(system="cta", partition="holdout", split=split_digest(partitions), sample=2)
    records = read_run(run).records
    assert [r.case_id for r in records] == [c.id for c in expected.resolve(bench, partitions)]
    assert recorded_selection(read_run(run)) == expected

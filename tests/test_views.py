"""Views: one growing work transcript per (model, system), a view per partition cut from it (issue 28).

Real HTTP on 127.0.0.1 (an OpenAI-compatible stand-in): a held-out run extended to
the full matrix runs only the missing cases, leaves the held-out view as it was,
and scores the held-out cases identically in both views.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from fake_openai_api import FakeOpenAI, chat_payload

from metrobench.cli import main
from metrobench.data.partition import load_split, select_cases
from metrobench.transcripts.records import read_run

DECLINED = chat_payload('{"outcome": "request_declined"}')


def _run(root, tmp_path, url, partition, out, work, *extra):
    config = tmp_path / "fake.yaml"
    config.write_text("name: fake\nretries: 1\nbackoff_s: 0.01\nconcurrency: 4\n")
    return main(["run", "--data", str(root), "--system", "doha", "--model-config", str(config),
                 "--base-url", f"{url}/v1", "--partition", partition, "--work", str(work), "--out", str(out),
                 *extra])


def _scores(root, run, out):
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(out), "--no-verify"]) == 0
    table = pq.read_table(out / "model=fake" / "system=doha" / "part.parquet").to_pylist()
    return {row["case_id"]: row for row in table}


def test_a_held_out_run_grows_to_the_full_matrix_running_only_the_missing_cases(root, bench, tmp_path, capsys):
    partitions = load_split(bench)
    holdout = [c.id for c in select_cases(bench, "doha", "holdout", partitions)]
    every = [c.id for c in select_cases(bench, "doha", "all", partitions)]
    work, held, full = tmp_path / "work.jsonl", tmp_path / "holdout.jsonl", tmp_path / "all.jsonl"
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert _run(root, tmp_path, api.url, "holdout", held, work) == 0
        first = len(api.requests)
        held_bytes = held.read_bytes()
        assert _run(root, tmp_path, api.url, "all", full, work) == 0
        second = len(api.requests) - first
        assert _run(root, tmp_path, api.url, "all", tmp_path / "fresh.jsonl", tmp_path / "fresh-work.jsonl") == 0
        fresh = len(api.requests) - first - second
    out = capsys.readouterr().out
    # a request per turn: the two runs together sent what one fresh full run sends, no case twice
    assert first + second == fresh
    assert f"ran {len(every) - len(holdout)} cases" in out and f"{len(holdout)} already done" in out
    assert sorted(r.case_id for r in read_run(work).records) == sorted(every)
    assert held.read_bytes() == held_bytes  # the held-out view is not touched by the full one
    # each view holds exactly its cases, stamped with its own selection
    for path, partition, ids in ((held, "holdout", holdout), (full, "all", every)):
        records = read_run(path).records
        assert sorted(r.case_id for r in records) == sorted(ids)
        assert {r.meta["selection"]["partition"] for r in records} == {partition}
    # the held-out cases score identically in both views
    a, b = _scores(root, held, tmp_path / "a"), _scores(root, full, tmp_path / "b")
    assert set(a) == set(holdout) and set(b) == set(every)
    assert all(json.dumps(a[i], sort_keys=True, default=str) == json.dumps(b[i], sort_keys=True, default=str)
               for i in holdout)
    # the full view again: nothing left to run
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert _run(root, tmp_path, api.url, "all", full, work) == 0
        assert api.requests == []


def test_a_case_recorded_twice_is_read_by_its_last_record_in_views_and_resume(bench, tmp_path):
    # issue 41, class 2: the view and the resume's rewrite kept the first record, the scorer the last
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.agents.runner.run import case_hash, prepare_resume
    from metrobench.data.selection import Selection
    from metrobench.transcripts.records import CaseRecord, latest_records, write_transcript
    from metrobench.transcripts.views import cut_view

    cases = select_cases(bench, "doha", "all", load_split(bench))[:2]
    a, b = (c.id for c in cases)
    cfg = ModelConfig(name="fake")
    meta = {c.id: {"config": cfg.fingerprint(), "case_sha": case_hash(c), "settings": cfg.settings()} for c in cases}
    records = [CaseRecord(case_id=a, model="fake", system="doha", raw_content="first", meta=dict(meta[a])),
               CaseRecord(case_id=b, model="fake", system="doha", error="503: busy",
                          meta={**meta[b], "retryable": True}),
               CaseRecord(case_id=a, model="fake", system="doha", raw_content="last", meta=dict(meta[a]))]
    latest, doubled = latest_records(records)
    assert [r.raw_content for r in latest.values()] == ["last", ""] and doubled == [a]
    work, view = tmp_path / "work.jsonl", tmp_path / "view.jsonl"
    write_transcript(work, records)
    assert cut_view(work, view, Selection(system="doha"), cases) == 2
    assert [(r.case_id, r.raw_content) for r in read_run(view).records] == [(a, "last"), (b, "")]
    # the resume drops the retryable failure and keeps, of the doubled case, the record that is scored
    assert prepare_resume(work, cfg, cases, restart=False, system="doha") == {a}
    assert [(r.case_id, r.raw_content) for r in read_run(work).records] == [(a, "last")]

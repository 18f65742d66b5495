"""Views: one growing work transcript per (model, system), a view per partition cut from it (issue 28).

Real HTTP on 127.0.0.1 (an OpenAI-compatible stand-in): a held-out run extended to
the full matrix runs only the missing cases, leaves the held-out view as it was,
and scores the held-out cases identically in both views.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from metrobench.cli import main
from metrobench.data.partition import load_split, select_cases
from metrobench.transcripts.records import read_run
from metrobench.standins.openai_api import FakeOpenAI, chat_payload

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
    # each view begins with the work transcript's header, stating its own selection
    work_header = json.loads(work.read_text().splitlines()[0])["header"]
    assert work_header["selection"] is None and work_header["system"] == "doha"
    for path, partition in ((held, "holdout"), (full, "all")):
        header = json.loads(path.read_text().splitlines()[0])["header"]
        assert header == {**work_header, "selection": read_run(path).records[0].meta["selection"]}
        assert header["selection"]["partition"] == partition and read_run(path).header.system == "doha"
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
    # the resume drops the retryable failure; of the doubled case both records stay (paid for), the last current
    assert prepare_resume(work, cfg, cases, restart=False, system="doha") == {a}
    assert [(r.case_id, r.raw_content) for r in read_run(work).records] == [(a, "first"), (a, "last")]


@pytest.mark.parametrize("spelling", ["w/fake/doha.jsonl", "w/fake/../fake/doha.jsonl", "./w/fake/doha.jsonl",
                                      "v/fake/doha.jsonl"])
def test_a_view_naming_the_work_transcript_under_another_spelling_is_refused(root, tmp_path, capsys, monkeypatch,
                                                                             spelling):
    """Issue 41, class 1: `--out` resolving to `--work` (a `..`, a `./`, a linked folder) would cut the
    model's whole transcript down to this view; it is one error line, before any request, nothing lost."""
    monkeypatch.chdir(tmp_path)
    work = Path("w/fake/doha.jsonl")
    (tmp_path / "v").symlink_to(tmp_path / "w", target_is_directory=True)
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert _run(root, tmp_path, api.url, "all", tmp_path / "all.jsonl", work, "--limit", "6") == 0
        paid, sent = work.read_bytes(), len(api.requests)
        capsys.readouterr()
        assert _run(root, tmp_path, api.url, "holdout", spelling, work, "--limit", "1") == 2
        assert _run(root, tmp_path, api.url, "holdout", spelling, work, "--limit", "1", "--restart") == 2
        assert len(api.requests) == sent
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("metrobench: error: --out ") for line in err)
    assert f"is the work transcript --work {work}" in err[0]
    assert work.read_bytes() == paid and len(read_run(work).records) == 6
    assert sorted(p.name for p in work.parent.iterdir()) == [".doha.jsonl.lock", "doha.jsonl"]


def test_a_changed_case_is_rerun_alone_and_every_other_views_cases_stay(root, tmp_path, capsys):
    """Issue 41, class 1: one case changed in the data is redone by `--rerun-changed` (the remedy the
    refusal names), its new record appended after the old; `--restart` sets the transcript aside."""
    work, full, one = tmp_path / "w" / "doha.jsonl", tmp_path / "all.jsonl", tmp_path / "one.jsonl"
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert _run(root, tmp_path, api.url, "all", full, work, "--limit", "6") == 0
        lines = work.read_text().splitlines()
        first = json.loads(lines[1])   # its first record (line 1 is the header)
        first["meta"]["case_sha"] = "0" * 16   # as if the case had been edited in the data since
        lines[1] = json.dumps(first, ensure_ascii=False, separators=(",", ":"))
        work.write_text("".join(line + "\n" for line in lines))
        paid = work.read_bytes()
        capsys.readouterr()
        changed = first["case_id"]
        assert _run(root, tmp_path, api.url, "all", one, work, "--cases", changed) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("metrobench: error: ") and f"case {changed} has changed" in err[0]
        assert "--rerun-changed" in err[0] and "--restart" not in err[0] and work.read_bytes() == paid
        sent = len(api.requests)
        assert _run(root, tmp_path, api.url, "all", one, work, "--cases", changed, "--rerun-changed") == 0
        assert len(api.requests) - sent == 1          # that case alone, one turn
        out = capsys.readouterr().out
        assert "ran 1 case (0 failed), 0 already done" in out
        assert work.read_bytes().startswith(paid)     # appended: every paid-for record stays
        records = read_run(work).records
        assert [r.case_id for r in records] == [json.loads(line)["case_id"] for line in lines[1:]] + [changed]
        assert records[-1].meta["case_sha"] != "0" * 16
        [view] = read_run(one).records
        assert view.meta["case_sha"] == records[-1].meta["case_sha"]
        # the six-case view again: nothing to run, and its changed case is the new record
        sent = len(api.requests)
        assert _run(root, tmp_path, api.url, "all", full, work, "--limit", "6") == 0
        assert len(api.requests) == sent
        assert [r.meta["case_sha"] for r in read_run(full).records if r.case_id == changed] == [view.meta["case_sha"]]
        grown = work.read_bytes()
        capsys.readouterr()
        # --restart starts afresh, the old transcript set aside (never deleted)
        assert _run(root, tmp_path, api.url, "all", one, work, "--cases", changed, "--restart") == 0
    said = capsys.readouterr()
    [aside] = [p for p in work.parent.glob("doha.*.jsonl")]
    assert aside.read_bytes() == grown and f"set aside as {aside}" in said.err
    assert [r.case_id for r in read_run(work).records] == [changed]


def test_a_linked_view_path_is_the_work_transcript_too(tmp_path):
    """A hard link or a symbolic link to the work transcript is the same file: refused as well."""
    import os

    from metrobench.errors import MetrobenchError
    from metrobench.transcripts.views import check_view_path

    work = tmp_path / "w" / "doha.jsonl"
    work.parent.mkdir()
    work.write_text("{}\n")
    os.link(work, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(work)
    for out in (tmp_path / "hard.jsonl", tmp_path / "soft.jsonl", tmp_path / "w" / "." / "doha.jsonl"):
        with pytest.raises(MetrobenchError, match=r"^--out .* is the work transcript --work "):
            check_view_path(work, out)
    check_view_path(work, tmp_path / "w" / "holdout.jsonl")        # another file: fine
    check_view_path(tmp_path / "new" / "doha.jsonl", tmp_path / "new" / "view.jsonl")  # neither there yet


def test_a_view_cut_from_an_old_header_less_work_transcript_gets_a_header_and_scores_the_same(root, bench, tmp_path):
    """Issue 42: a view always begins with a header; cut from a work transcript written before headers,
    the header is made from its records (model, system, the stamps they agree on)."""
    from metrobench.data.selection import Selection
    from metrobench.transcripts.views import cut_view

    work, view = tmp_path / "w" / "doha.jsonl", tmp_path / "view.jsonl"
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert _run(root, tmp_path, api.url, "all", view, work, "--limit", "3") == 0
    header, *records = work.read_text().splitlines()
    old_work = tmp_path / "old" / "doha.jsonl"
    old_work.parent.mkdir()
    old_work.write_text("".join(line + "\n" for line in records))     # as the old writer left it
    from_old = tmp_path / "from-old.jsonl"
    selection = Selection.from_meta(json.loads(records[0])["meta"]["selection"], "test")
    cases = [bench.case(json.loads(line)["case_id"]) for line in records]
    assert cut_view(old_work, from_old, selection, cases) == 3
    made = json.loads(from_old.read_text().splitlines()[0])["header"]
    stated = json.loads(header)["header"]
    assert made == {**stated, "selection": selection.to_meta(), "version": ""}   # which metrobench began it: unknown
    assert from_old.read_text().splitlines()[1:] == view.read_text().splitlines()[1:]
    assert _scores(root, from_old, tmp_path / "a") == _scores(root, view, tmp_path / "b")

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


# --------------------------------------------------------------------------- item 4: the judge's identity


def test_one_judge_name_at_two_endpoints_never_shares_a_judgment(root, tmp_path, capsys, monkeypatch):
    # a stand-in tried as `standin`, then a "real" judge at another URL under the same name: the second
    # is asked (before: "4 cached, 0 new", the stand-in's grades reported as the judge's)
    from metrobench.standins.judge import JudgeStandin

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    run = tmp_path / "doha.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "doha", "--sample", "3", "--out", str(run)]) == 0
    cache = tmp_path / "cache.jsonl"
    with JudgeStandin() as first, JudgeStandin() as second:
        def score(server, out: str) -> str:
            assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / out),
                         "--judge", "openai", "--judge-model", "standin", "--judge-url", f"{server.url}/v1",
                         "--judge-cache", str(cache)]) == 0
            return capsys.readouterr().out.splitlines()[-1]

        asked = score(first, "a")
        assert ", 0 cached, " not in asked and asked.startswith("judge standin (openai at http://127.0.0.1:")
        new = int(asked.split(" cached, ")[1].split(" new")[0])
        assert new > 0 and f"{first.url.rsplit(':', 1)[1]}):" in asked
        assert score(second, "b").endswith(f"0 cached, {new} new judgments; 0 of {new} replies unparseable "
                                           "(no 'Score: N': scored 1 of 2, as the reference scores them)")
        assert len(second.requests) == new
        assert f"{new} cached, 0 new" in score(first, "c")   # each endpoint's own judgments are reused


def test_old_cache_entries_are_reused_only_at_the_providers_own_endpoint(tmp_path):
    from metrobench.scoring.judge import Judge, JudgeCache, JudgeIdentity, cache_key

    task = next(iter(_tasks()))
    cache = tmp_path / "cache.jsonl"
    old = {"key": cache_key(task, "judge-x"), "component": task.component, "case_id": task.case_id,
           "judge_model": "judge-x", "score": 2, "reason": "old", "raw": "Score: 2 | old"}
    cache.write_text(json.dumps(old) + "\n")

    class Grader:
        model = "judge-x"

        def __init__(self, identity: JudgeIdentity) -> None:
            self.identity, self.asked = identity, 0

        def complete(self, system: str, prompt: str) -> str:
            self.asked += 1
            return "Score: 0 | new"

    own = Grader(JudgeIdentity("anthropic", "https://api.anthropic.com:443", "judge-x", True))
    assert Judge(own, JudgeCache(cache)).resolve([task])[0]["reason"] == "old" and own.asked == 0
    other = Grader(JudgeIdentity.of("anthropic", "judge-x", "http://127.0.0.1:8091/v1"))
    assert not other.identity.default and other.identity.endpoint == "http://127.0.0.1:8091"
    assert Judge(other, JudgeCache(cache)).resolve([task])[0]["reason"] == "new" and other.asked == 1


def _tasks():
    from metrobench.scoring.rubrics import JudgeTask

    yield JudgeTask("scope_adherence", "MARTA-A-001", "rubric prompt", "answer", lambda grade: grade * 5.0)


def test_the_identity_follows_the_sdks_base_url_variable(monkeypatch):
    from metrobench.scoring.judge import JudgeIdentity

    monkeypatch.setenv("OPENAI_BASE_URL", "http://Judge.Example:9000/v1")
    assert JudgeIdentity.of("openai", "m", None) == JudgeIdentity("openai", "http://judge.example:9000", "m", False)
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert JudgeIdentity.of("openai", "m", None).default
    assert JudgeIdentity.of("openai", "m", "https://api.openai.com/v1").default


# --------------------------------------------------------------------------- item 10: one ratings reader


def _agreement(tmp_path, capsys, content: bytes | str) -> tuple[int, str, str]:
    path = tmp_path / "ratings.csv"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    code = main(["judge-agreement", "--ratings", str(path), "--n-resamples", "50"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


GOOD = "item,author,judge\n1,2,2\n2,1,2\n3,0,0\n4,2,1\n"


@pytest.mark.parametrize("content,message", [
    ("item,author,judge,author\n1,2,2,0\n2,1,2,2\n", "line 1: rater column 'author' is duplicated (this file has it)"),
    ("item,author,judge\n1,2,2\n2,1,2\n1,2,2\n", "line 4: item 1 is rated on an earlier line too (line 2)"),
    ("item,author,judge\n1,2,2\n,1,2\n", "line 3: field item: '' is not an item id (blank)"),
    ("item,author\n1,2\n", "one rater column (author); agreement needs two"),
    ("item;author;judge\n1;2;2\n2,1;2\n", "line 3: 2 fields, the header has 3 (split at ';')"),
    (b"\xff\xfe" + "item,author,judge\n1,2,3\n".encode("utf-16-le"), "line 2: item 1: field judge: '3' is not a rating"),
    ("item,author,judge\n".encode("utf-16-le"), "NUL bytes: UTF-16 without a byte-order mark?"),
    (b"item,author\n1,\xff\n", "not UTF-8 text"),
])
def test_judge_agreement_ratings_are_refused_as_table1_refuses_them(tmp_path, capsys, content, message):
    code, _, err = _agreement(tmp_path, capsys, content)
    assert code == 2 and err.startswith(f"metrobench: error: {tmp_path / 'ratings.csv'}: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("encode", [
    lambda text: text,
    lambda text: text.replace(",", ";"),                          # a comma-decimal locale's CSV
    lambda text: text.replace(",", "\t"),
    lambda text: text.encode("utf-16"),                           # UTF-16 with its byte-order mark
    lambda text: text.encode("utf-8-sig"),
])
def test_judge_agreement_reads_every_spelling_of_one_file_alike(tmp_path, capsys, encode):
    code, out, err = _agreement(tmp_path, capsys, encode(GOOD))
    assert code == 0, err
    assert "author vs judge" in out and f"{4:>5}" in out.splitlines()[1]


def test_table1_reads_a_semicolon_file_as_judge_agreement_does(tmp_path):
    from metrobench.calibration.table import read_people

    path = tmp_path / "people.csv"
    path.write_text("id;author;second\n1;2;\n2;1;1\n")
    assert read_people([path], [1, 2]) == {"author": {1: 2, 2: 1}, "second": {1: None, 2: 1}}


# --------------------------------------------------------------------------- item 18: which benchmark root


@pytest.fixture
def unsaid(monkeypatch):
    """A process that has opened no benchmark yet (the line is said once per process and root)."""
    from metrobench.commands import common

    monkeypatch.setattr(common, "_FOUND", {}, raising=False)
    monkeypatch.setattr(common, "_SAID", set(), raising=False)


def test_score_and_run_say_which_benchmark_root_they_used(bench, root, tmp_path, capsys, monkeypatch, unsaid):
    run = tmp_path / "t.jsonl"
    write_transcript(run, [_record(bench, CASE, None)])
    monkeypatch.setenv("METROBENCH_DATA", str(root))
    assert main(["score", "--run", str(run), "--out", str(tmp_path / "scores"), "--model", "m"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"benchmark data: {root} (from $METROBENCH_DATA)"
    assert out.count("benchmark data:") == 1
    from metrobench.commands import common

    monkeypatch.setattr(common, "_FOUND", {}, raising=False)
    monkeypatch.setattr(common, "_SAID", set(), raising=False)
    code = main(["run", "--data", str(root), "--system", "marta", "--model", "m", "--provider", "openai",
                 "--base-url", "http://127.0.0.1:9/v1", "--cases", CASE, "--out", str(tmp_path / "r.jsonl")])
    assert code == 2   # nothing listens there; the line came first
    assert capsys.readouterr().out.splitlines()[0] == f"benchmark data: {root} (from --data)"


def test_eval_says_the_root_once_and_what_named_it(root, tmp_path, capsys, monkeypatch, unsaid):
    from metrobench.standins.openai_api import FakeOpenAI, chat_payload

    monkeypatch.setenv("METROBENCH_DATA", str(root))
    with FakeOpenAI(lambda request: chat_payload('{"outcome": "request_declined"}')) as api:
        assert main(["eval", "--model", "mine", "--provider", "openai", "--base-url", f"{api.url}/v1",
                     "--system", "doha,marta", "--sample", "2", "--results", str(tmp_path / "results"),
                     "--progress", "0"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("benchmark data:")] == [
        f"benchmark data: {root} (from $METROBENCH_DATA)"]


# --------------------------------------------------------------------------- item 16: --system all,marta


@pytest.mark.parametrize("given", ["all,marta", "marta,all"])
def test_eval_refuses_all_in_a_list_saying_why(capsys, given):
    code = main(["eval", "--model", "mine", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1",
                 "--system", given])
    err = capsys.readouterr().err
    assert code == 2 and "all stands alone (every system)" in err and "unknown system" not in err, err
    assert [line for line in err.splitlines() if "error" in line][0].count("all stands alone") == 1


# --------------------------------------------------------------------------- item 13: a judge that never answers


def test_a_judge_that_never_answers_fails_within_its_settings(bench, root, tmp_path, capsys, monkeypatch):
    # an endpoint that accepts and never answers: --judge-timeout and --judge-attempts bound the wait
    # (before: 6 x 120 s a component, no setting); the verdict is the same however fast the machine is
    import socket

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = tmp_path / "t.jsonl"
    write_transcript(run, [_record(bench, "MARTA-H-007", None)])
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)                   # the kernel accepts; nobody ever reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        code = main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "s"),
                     "--judge", "openai", "--judge-model", "j", "--judge-url", url,
                     "--judge-timeout", "0.2", "--judge-attempts", "1"])
    err = capsys.readouterr().err
    [line] = [ln for ln in err.splitlines() if ln.startswith("metrobench: error:")]
    assert code == 2 and "no complete reply within 0.2 s after 1 attempts" in line and "MARTA-H-007" in line


def test_a_stalled_judge_is_named_with_what_it_waits_for(bench):
    import threading

    from metrobench.scoring.judge import Judge

    said: list[str] = []
    spoken = threading.Event()

    class Stalled:
        model, timeout_s = "judge-x", 120.0

        def complete(self, system: str, prompt: str) -> str:
            assert spoken.wait(60), "the notice never came"
            return "Score: 2 | fine"

    def notice(line: str) -> None:
        said.append(line)
        spoken.set()

    judge = Judge(Stalled(), notice_s=0.01, notice=notice, concurrency=1)
    [task] = list(_tasks())
    assert judge.resolve([task])[0]["score"] == 2
    assert said[0] == ("metrobench: note: judge judge-x: no reply for 0.01 s, 1 request waiting (first: case "
                       "MARTA-A-001, scope_adherence); each request may take up to 120 s, tried up to 6 times "
                       "(--judge-timeout, --judge-attempts)")
    assert len(said) == 1     # once per silence, not once a tick


@pytest.mark.parametrize("flag,value", [("--judge-timeout", "0"), ("--judge-timeout", "nan"),
                                        ("--judge-attempts", "0")])
def test_the_judges_settings_are_checked(root, tmp_path, capsys, flag, value):
    assert main(["score", "--data", str(root), "--run", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "s"),
                 flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and "unrecognized" not in err, err

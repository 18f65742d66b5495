"""Judge-calibration agreement statistics."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from metrobench.cli import main
from metrobench.stats.agreement import agreement_table, gwet_ac2, kappa_interval, read_ratings, weighted_kappa


def _kappa_by_moments(a, b):
    """Quadratic-weighted kappa equals 2 cov / (var_a + var_b + (mean_a - mean_b)^2)."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / len(a)
    return 2 * cov / (statistics.pvariance(a) + statistics.pvariance(b) + (ma - mb) ** 2)


def test_weighted_kappa_matches_the_moment_identity():
    rng = random.Random(7)
    for _ in range(20):
        a = [rng.choice([0, 1, 2, 2, 2]) for _ in range(50)]
        b = [x if rng.random() < 0.7 else rng.choice([0, 1, 2]) for x in a]
        assert weighted_kappa(a, b) == pytest.approx(_kappa_by_moments(a, b))


def test_ac2_values_by_hand_and_the_kappa_paradox():
    assert gwet_ac2([0, 2], [2, 0]) == pytest.approx(-1.0)  # pa 0, pe 0.5
    assert gwet_ac2([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    # Nearly all 2s: kappa collapses while AC2 stays high (paper Table 1's pattern).
    a = [2] * 95 + [1] * 5
    b = [2] * 93 + [1, 1] + [2] * 4 + [1]
    assert weighted_kappa(a, b) < 0.3 < 0.9 < gwet_ac2(a, b)
    assert math.isnan(weighted_kappa([2, 2], [2, 2]))


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate():
    rng = random.Random(3)
    a = [rng.choice([0, 1, 2]) for _ in range(100)]
    b = [x if rng.random() < 0.6 else rng.choice([0, 1, 2]) for x in a]
    lo, hi = kappa_interval(a, b, n_resamples=500, seed=42)
    assert lo < weighted_kappa(a, b) < hi
    assert (lo, hi) == kappa_interval(a, b, n_resamples=500, seed=42)


def test_ratings_csv_and_cli(tmp_path, capsys):
    path = tmp_path / "ratings.csv"
    path.write_text("item,author,second,judge\n1,2,2,2\n2,1,2,1\n3,0,0,1\n4,2,,2\n5,2,1,2\n")
    ratings = read_ratings(path)
    assert ratings["second"] == [2, 2, 0, None, 1]
    rows = agreement_table(ratings, n_resamples=200)
    assert [r.pair for r in rows] == ["author vs second", "author vs judge", "second vs judge"]
    assert rows[0].n == 4 and rows[1].n == 5
    assert rows[1].exact == pytest.approx(0.8) and rows[1].within_one == 1.0
    assert main(["judge-agreement", "--ratings", str(path), "--n-resamples", "200"]) == 0
    assert "author vs judge" in capsys.readouterr().out
    path.write_text("item,author,judge\n1,2,3\n")
    assert main(["judge-agreement", "--ratings", str(path)]) == 2
    assert "line 2: item 1: field judge: '3' is not a rating" in capsys.readouterr().err


# --- judge-agreement over two judges' caches or scored folders (issue 44) ---------------------------


class _Grader:
    """A judge backend answering each prompt with the score it is given for it."""

    def __init__(self, model: str, grades: dict[str, int]) -> None:
        self.model, self.grades = model, grades

    def complete(self, system: str, prompt: str) -> str:
        return f"Score: {self.grades[prompt]} | graded by {self.model}"


def _cache(path, model, grades, component="scope_adherence"):
    """A judge cache as the real Judge writes it: case c<i>'s answer graded ``grades[c<i>]``."""
    from metrobench.scoring.judge import Judge, JudgeCache
    from metrobench.scoring.rubrics import JudgeTask

    judge = Judge(_Grader(model, {f"prompt {case}": g for case, g in grades.items()}), JudgeCache(path),
                  concurrency=1)
    tasks = [JudgeTask(component, case, f"prompt {case}", f"answer of {case}", float) for case in grades]
    assert [v["score"] for v in judge.resolve(tasks)] == list(grades.values())
    return path


# Items c1..c4 rated by both: A 2 2 1 0, B 2 1 1 2. By hand: exact 2/4; within one 3/4 (0 vs 2 is not);
# means 1.25, 1.5; cov -0.125, var 0.6875 and 0.25: kappa_w = 2 cov / (var + var + 0.25^2) = -0.25.
# AC2: pa = (1 + .75 + 1 + 0)/4 = 0.6875; pi = (1/8, 3/8, 4/8); pe = 6/6 * 38/64 = 0.59375;
# AC2 = 0.09375 / 0.40625 = 3/13.
GRADES_A = {"c1": 2, "c2": 2, "c3": 1, "c4": 0, "c5": 2}
GRADES_B = {"c1": 2, "c2": 1, "c3": 1, "c4": 2, "c6": 0}


def test_two_judge_caches_are_rated_over_their_common_pairs(tmp_path, capsys):
    from metrobench.calibration.sources import common, from_caches

    a = _cache(tmp_path / "a.jsonl", "judge-a", GRADES_A)
    b = _cache(tmp_path / "b.jsonl", "judge-b", GRADES_B)
    items, ratings = common(from_caches([a, b]), "the judge caches")
    assert items == [f"c{i}/scope_adherence" for i in (1, 2, 3, 4)]
    assert ratings == {"judge-a": [2, 2, 1, 0], "judge-b": [2, 1, 1, 2]}
    [row] = agreement_table(ratings, n_resamples=200)
    assert (row.pair, row.n, row.exact, row.within_one) == ("judge-a vs judge-b", 4, 0.5, 0.75)
    assert row.kappa == pytest.approx(-0.25) and row.ac2 == pytest.approx(3 / 13)

    out = tmp_path / "ratings.csv"
    assert main(["judge-agreement", "--judge-cache", str(a), "--judge-cache", str(b), "--ratings-out", str(out),
                 "--n-resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "4 case-component items rated by at least two of: judge-a, judge-b" in printed
    line = next(x for x in printed.splitlines() if x.startswith("judge-a vs judge-b"))
    assert line.split()[3:7] == ["4", "50%", "75%", "-0.25"] and line.endswith(" 0.23")
    assert out.read_text() == ("id,judge-a,judge-b\nc1/scope_adherence,2,2\nc2/scope_adherence,2,1\n"
                               "c3/scope_adherence,1,1\nc4/scope_adherence,0,2\n")
    # the CSV written is the one --ratings reads, and gives the same table
    assert main(["judge-agreement", "--ratings", str(out), "--n-resamples", "200"]) == 0
    assert line in capsys.readouterr().out


def test_one_cache_the_calibration_judges_share_holds_two_raters(tmp_path):
    from metrobench.calibration.sources import common, from_caches

    shared = _cache(tmp_path / "shared.jsonl", "judge-a", GRADES_A)
    _cache(shared, "judge-b", GRADES_B)
    assert common(from_caches([shared]), "the judge caches")[1] == {"judge-a": [2, 2, 1, 0],
                                                                    "judge-b": [2, 1, 1, 2]}
    # one model id in two caches: each column says which file
    again = _cache(tmp_path / "again.jsonl", "judge-a", {"c1": 0})
    assert list(from_caches([again, shared])) == [
        f"judge-a ({again})", f"judge-a ({shared})", "judge-b"]


def test_replies_without_a_score_are_rated_one_and_counted(tmp_path, capsys):
    from metrobench.calibration.sources import from_caches
    from metrobench.scoring.judge import Judge, JudgeCache
    from metrobench.scoring.rubrics import JudgeTask

    class Chatty(_Grader):
        def complete(self, system, prompt):
            return "I think it is fine." if prompt.endswith("c2") else super().complete(system, prompt)

    judge = Judge(Chatty("judge-c", {"prompt c1": 0, "prompt c3": 2}), JudgeCache(tmp_path / "c.jsonl"))
    judge.resolve([JudgeTask("scope_adherence", c, f"prompt {c}", "answer", float) for c in ("c1", "c2", "c3")])
    assert from_caches([tmp_path / "c.jsonl"]) == {"judge-c": {"c1/scope_adherence": 0, "c2/scope_adherence": 1,
                                                               "c3/scope_adherence": 2}}
    assert "judge judge-c: 1 of 3 replies without a 'Score: N' to read, rated 1" in capsys.readouterr().err


def _bad_input(tmp_path):
    """A good cache, and beside it: a ratings CSV, a cache sharing no item, a rating of 3, one item twice."""
    a = _cache(tmp_path / "a.jsonl", "judge-a", GRADES_A)
    (tmp_path / "notes.csv").write_text("id,judge\n1,2\n")
    _cache(tmp_path / "other.jsonl", "judge-b", {"c9": 1})
    entry = {"component": "scope_adherence", "case_id": "c1", "judge_model": "judge-b", "reason": "",
             "raw": "Score: 1"}
    (tmp_path / "score3.jsonl").write_text(json.dumps({"key": "k", **entry, "score": 3}) + "\n")
    (tmp_path / "twice.jsonl").write_text("".join(json.dumps({"key": key, **entry, "score": 1}) + "\n"
                                                  for key in ("k1", "k2")))
    return a


@pytest.mark.parametrize("build, message", [
    (lambda t, a: [a, t / "notes.csv"], "notes.csv: not a judge cache: no line holds a judgment"),
    (lambda t, a: [a], "the judge caches give one rater (judge-a); agreement needs two"),
    (lambda t, a: [a, t / "other.jsonl"], "no case and component is rated by two of judge-a, judge-b"),
    (lambda t, a: [a, t / "missing.jsonl"], "missing.jsonl: no such judge cache"),
    (lambda t, a: [a, t / "score3.jsonl"], "score3.jsonl: line 1: case c1: scope_adherence: field score: 3 is "
                                           "not a rating"),
    (lambda t, a: [a, t / "twice.jsonl"], "twice.jsonl: case c1: scope_adherence: judge judge-b judged it more "
                                          "than once"),
])
def test_bad_judge_caches_are_one_error_line(tmp_path, capsys, build, message):
    a = _bad_input(tmp_path)
    out = tmp_path / "ratings.csv"
    args = [x for path in build(tmp_path, a) for x in ("--judge-cache", str(path))]
    assert main(["judge-agreement", *args, "--ratings-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("metrobench: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def _scored(folder, grades, model="m1"):
    """A scored folder: judged scope_adherence (max 3) from the judge's 0/1/2 as points 0/1.5/3, a short
    cut (empty answer, no judge call) and a Tier 1 component, which judge-agreement leaves out."""
    from metrobench.scoring.scorer import CaseScore, ComponentScore
    from metrobench.scoring.store import write_scores

    cases = []
    for case, grade in grades.items():
        cases.append(CaseScore(case, "advisory", [
            ComponentScore("scope_adherence", 1.5 * grade, 3.0, f"Judge: graded {grade}", judged=True),
            ComponentScore("no_data_fabrication", 0.0, 2.0, "empty answer", judged=True),
            ComponentScore("route_correct", 1.0, 1.0, "submitted")]))
    write_scores(folder, model, "marta", cases, {})
    return folder


def test_two_scored_folders_are_rated_over_the_judged_components(tmp_path, capsys):
    a = _scored(tmp_path / "scores-a", GRADES_A)
    b = _scored(tmp_path / "scores-b", GRADES_B)
    out = tmp_path / "ratings.csv"
    assert main(["judge-agreement", "--scores", str(a), "--scores", str(b), "--ratings-out", str(out),
                 "--n-resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert f"4 case-component items rated by at least two of: {a}, {b}" in printed
    assert out.read_text().splitlines() == [f"id,{a},{b}", "m1/marta/c1/scope_adherence,2,2",
                                            "m1/marta/c2/scope_adherence,2,1", "m1/marta/c3/scope_adherence,1,1",
                                            "m1/marta/c4/scope_adherence,0,2"]
    line = next(x for x in printed.splitlines() if " vs " in x)
    assert line.split()[-6:-3] == ["50%", "75%", "-0.25"] and line.endswith(" 0.23")
    assert main(["judge-agreement", "--scores", str(a), "--judge-cache", str(out)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err

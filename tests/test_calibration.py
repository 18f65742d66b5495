"""Table 1, the judge's calibration: the sample, the judges' ratings, people's ratings and the table."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from metrobench import layout
from metrobench.calibration.sample import (PAIR_KEYS, RUBRIC_CATEGORIES, draw, load_sample, published_sample,
                                           select_pairs, write_sample)
from metrobench.errors import MetrobenchError
from metrobench.scoring.scorer import CaseScore, ComponentScore
from metrobench.scoring.store import write_scores
from metrobench.transcripts.records import CaseRecord

MODEL = "m1"


# --- the sample ------------------------------------------------------------------------------------


def test_the_published_blind_file_loads_as_the_sample(bench):
    sample = published_sample(bench)
    assert len(sample.pairs) == 100 and sample.ids == list(range(1, 101))
    counts = Counter(p["rubric"] for p in sample.pairs)
    # 100 over 7 rubrics: 14 each, the remainder to the first two by name (the reference's draw)
    assert counts == {"advisory_content_correct": 15, "cultural_accuracy": 15, "no_data_fabrication": 14,
                      "policy_acknowledged": 14, "safety_response_quality": 14, "scope_adherence": 14,
                      "temporal_accuracy": 14}
    assert all(p["category"] in RUBRIC_CATEGORIES[p["rubric"]] for p in sample.pairs)
    # two cases were rewritten after the sample was drawn: reported, not refused
    assert sorted(sample.changed) == ["BART-C-018", "CTA-C-018"]


def _published(bench) -> list[dict]:
    return json.loads((bench.root / "dashboard/calibration_cases_blind.json").read_text())


@pytest.mark.parametrize("break_it,message", [
    (lambda d: d[3].update(case_id="MARTA-C-099"), "pair 4: case MARTA-C-099 is not in the benchmark"),
    (lambda d: d[0].update(category="D"), "pair 1: case TRTC-C-013 is taipei/C in the benchmark, taipei/D in"),
    (lambda d: d[5].pop("model_response"), "pair 6: no model_response (not a calibration sample's pair)"),
    (lambda d: d[7].update(id=3), "pair 3: field id: 3 is not a new positive integer"),
    (lambda d: d[2].update(rubric="route_correct"), "pair 3: field rubric: 'route_correct' is not a judged"),
])
def test_a_sample_of_another_version_or_shape_is_refused(bench, tmp_path, break_it, message):
    pairs = _published(bench)
    break_it(pairs)
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(pairs))
    with pytest.raises(MetrobenchError) as err:
        load_sample(path, bench)
    assert str(err.value).startswith(f"{path}: {message}")
    for text in ("", "{}", "[]", "[1, 2]"):
        path.write_text(text)
        with pytest.raises(MetrobenchError, match=str(path)):
            load_sample(path, bench)


def _scored_run(bench, tmp_path: Path, systems=("marta", "bart")) -> tuple[Path, Path]:
    """A model's scores and transcripts: each judged rubric's score cycling full, 1/2, 0 over its cases."""
    scores, runs = tmp_path / "scores", tmp_path / "runs"
    turn = 0
    for system in systems:
        cases, records = [], []
        for case in bench.cases(system):
            entry = CaseScore(case.id, case.category)
            for rubric, maximum in case.raw["scoring"].items():
                if rubric in RUBRIC_CATEGORIES:
                    turn += 1
                    entry.components.append(ComponentScore(rubric, [maximum, maximum / 2, 0][turn % 3], maximum,
                                                           "Judge: x", judged=True))
            cases.append(entry)
            records.append(CaseRecord(case.id, MODEL, system, response={
                "outcome": "route_and_fare_ready", "ui_updates": {"assistant_message": f"answer to {case.id}"}},
                tool_calls_made=[{"name": "route_planner", "arguments": {"origin": "A"}, "result": {"x": "y" * 5000}}]))
        write_scores(scores, MODEL, system, cases, {})
        path = Path(layout.run_file(str(runs), MODEL, system))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(r.to_json() + "\n" for r in records))
    return scores, runs


def test_selection_is_stratified_by_rubric_seeded_and_in_the_published_shape(bench, tmp_path):
    scores, runs = _scored_run(bench, tmp_path)
    pairs = select_pairs(bench, scores, runs, MODEL, ["marta", "bart"], count=30, seed=42)
    # 30 over 7 rubrics: 4 each and the remainder (2) to the first two by name
    assert Counter(p["rubric"] for p in pairs) == {"advisory_content_correct": 5, "cultural_accuracy": 5,
                                                    "no_data_fabrication": 4, "policy_acknowledged": 4,
                                                    "safety_response_quality": 4, "scope_adherence": 4,
                                                    "temporal_accuracy": 4}
    assert [p["id"] for p in pairs] == list(range(1, 31))
    assert [p["rubric"] for p in pairs] == sorted(p["rubric"] for p in pairs)
    assert all(tuple(p) == PAIR_KEYS for p in pairs)
    assert len({p["case_id"] for p in pairs}) == 30  # a case is drawn for one rubric only
    assert all(p["category"] in RUBRIC_CATEGORIES[p["rubric"]] for p in pairs)
    first = pairs[0]
    assert json.loads(first["model_response"])["ui_updates"]["assistant_message"] == f"answer to {first['case_id']}"
    detail = first["tool_calls_detail"][0]
    assert detail["arguments"] == '{"origin": "A"}' and detail["result"].endswith("...") \
        and len(detail["result"]) == 4003
    # deterministic: the same draw twice, byte for byte; another seed draws others
    a, b = write_sample(pairs, tmp_path / "a.json"), write_sample(
        select_pairs(bench, scores, runs, MODEL, ["marta", "bart"], count=30, seed=42), tmp_path / "b.json")
    assert a.read_bytes() == b.read_bytes()
    other = select_pairs(bench, scores, runs, MODEL, ["marta", "bart"], count=30, seed=7)
    assert [p["case_id"] for p in other] != [p["case_id"] for p in pairs]
    # what it writes loads as a sample
    assert load_sample(a, bench).ids == list(range(1, 31))


def test_the_draw_takes_partial_credit_first_and_never_overshoots():
    found = {"scope_adherence": [{"case_id": f"c{i}", "system": "s", "full": i % 2 == 0} for i in range(40)],
             "temporal_accuracy": [{"case_id": f"t{i}", "system": "s", "full": False} for i in range(3)]}
    picked = draw(found, 7, seed=1)
    by = Counter(c["rubric"] for c in picked)
    # targets 4 and 3 (7 over two rubrics, the remainder to the first by name)
    assert by == {"scope_adherence": 4, "temporal_accuracy": 3}
    scope = [c for c in picked if c["rubric"] == "scope_adherence"]
    assert sum(not c["full"] for c in scope) == 4  # min(20 partial, 4 // 2 + 2, 4): all partial
    # one pair: the first rubric's; the reference's arithmetic would have taken two partial ones
    assert [c["rubric"] for c in draw(found, 1, seed=1)] == ["scope_adherence"]


def test_the_sample_command_writes_the_published_file_byte_for_byte(bench, tmp_path, capsys):
    from metrobench.cli import main

    out = tmp_path / "calibration" / "sample.json"
    assert main(["calibration-sample", "--data", str(bench.root), "--out", str(out)]) == 0
    assert out.read_bytes() == (bench.root / "dashboard/calibration_cases_blind.json").read_bytes()
    printed = capsys.readouterr().out
    assert "2 case(s) rewritten since the sample was drawn: CTA-C-018, BART-C-018" in printed
    assert "100 pairs from" in printed and "advisory_content_correct 15" in printed
    config = tmp_path / "select.yaml"
    config.write_text("calibration: {sample: select}\n")
    assert main(["calibration-sample", "--data", str(bench.root), "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"metrobench: error: {config}: field calibration: ") and err.count("\n") == 1
    assert "select draws from a model's scored runs: name it in calibration.model" in err


# --- the judges' ratings ---------------------------------------------------------------------------

SECRET = "sk-ant-test-calibration-never-log-me"
#: The stand-in judge's grade per rubric, recognised by a phrase of each rubric prompt.
GRADES = {"needs careful handling": 1, "can use only these tools": 2, "could draw on two sources": 0,
          "while a service disruption": 2, "after a policy change": 0, "at a particular time of day": 1}
BY_RUBRIC = {"safety_response_quality": 1, "scope_adherence": 2, "no_data_fabrication": 0,
             "advisory_content_correct": 2, "policy_acknowledged": 0, "temporal_accuracy": 1}


def grade(prompt: str) -> str:
    return next((f"Score: {n} | graded by phrase" for phrase, n in GRADES.items() if phrase in prompt), "no idea")


@pytest.fixture
def api(monkeypatch):
    from metrobench.standins.messages_api import FakeMessagesAPI

    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    with FakeMessagesAPI(grade) as server:
        yield server


def _study(text: str):
    import yaml

    from metrobench.study import validate_study

    return validate_study(yaml.safe_load(text))


def test_normalise_as_the_reference_analysis():
    from metrobench.calibration.judging import normalise

    assert [normalise(p, 10) for p in (0, 0.5, 5, 6.67, 9.99, 10, 12)] == [0, 1, 1, 1, 1, 2, 2]
    assert [normalise(p, 15) for p in (0, 8, 15)] == [0, 1, 2]


def test_the_judge_rates_every_pair_through_its_cache(bench, tmp_path, api):
    from metrobench.calibration.judging import judges_of, pair_view, rate
    from metrobench.scoring.registry import spec

    study = _study(f"scoring: {{judge: anthropic, judge_url: '{api.url}'}}")
    sample = published_sample(bench)
    [judge] = judges_of(study, tmp_path / "cache.jsonl")
    rated = rate(sample.pairs, judge, bench)
    assert rated.judge == "claude-haiku-4-5-20251001" and list(rated.ratings) == sample.ids
    # the judged rubrics got the stand-in's grade, over the real wire format; the rest are normalised points
    assert rated.asked == 84 == len(api.requests)
    assert {r["body"]["model"] for r in api.requests} == {"claude-haiku-4-5-20251001"}
    for pair in sample.pairs:
        outcome = spec(pair["rubric"]).function(pair_view(pair, bench))
        if isinstance(outcome, tuple):
            maximum = pair_view(pair, bench).maximum(pair["rubric"])
            expected = 0 if outcome[0] == 0 else 2 if outcome[0] >= maximum else 1
        else:
            expected = BY_RUBRIC[pair["rubric"]]
        assert rated.ratings[pair["id"]] == expected, pair["id"]
    cultural = Counter(rated.ratings[p["id"]] for p in sample.pairs if p["rubric"] == "cultural_accuracy")
    assert cultural == {0: 4, 1: 8, 2: 3}  # the keyword check's points 0, 5, 6.67 and 10 of 10
    # a second rating reads the cache: no request
    [again] = judges_of(study, tmp_path / "cache.jsonl")
    assert rate(sample.pairs, again, bench).ratings == rated.ratings and len(api.requests) == 84
    assert again.hits == 84 and again.misses == 0


def test_two_judges_of_one_model_are_refused():
    from metrobench.calibration.judging import judges_of

    study = _study("scoring: {judge: openai, judge_model: m, judge_url: 'http://127.0.0.1:9'}\n"
                   "calibration: {judges: [{judge: openai, model: m, url: 'http://127.0.0.1:9'}]}")
    with pytest.raises(MetrobenchError, match="calibration.judges: m is listed twice"):
        judges_of(study, None)


# --- people's ratings and the table ----------------------------------------------------------------

#: Author (rows) x judge (columns), 100 pairs made to the paper's author-vs-judge figures
#: (exact 82 %, within one 97 %, kappa_w 0.53, AC2 0.89): marginals author (1, 21, 78), judge (7, 20, 73).
PAPER_TABLE = [[0, 1, 0], [4, 13, 4], [3, 6, 69]]


def _paper_raters(sample):
    author, judge = {}, {}
    ids = iter(sample.ids)
    for i, row in enumerate(PAPER_TABLE):
        for j, count in enumerate(row):
            for _ in range(count):
                pair = next(ids)
                author[pair], judge[pair] = i, j
    return author, judge


def test_the_paper_marginals_give_the_figures_computed_by_hand(bench):
    from metrobench.calibration.table import table1

    sample = published_sample(bench)
    author, judge = _paper_raters(sample)
    table = table1(sample, {"author": author}, {"judge": judge}, n_resamples=200, seed=42)
    row = table.frame[table.frame["rubric"] == "all"].iloc[0]
    assert (row.rater_a, row.rater_b, row.n) == ("author", "judge", 100)
    assert row.exact == pytest.approx(0.82) and row.within_one == pytest.approx(0.97)
    # kappa_w = 1 - observed / expected weighted disagreement (weights (i - j)^2 / 4):
    # observed (15 one apart x 1/4 + 3 two apart x 1) / 100 = 0.0675;
    # expected (1*20 + 21*7 + 21*73 + 78*20) / 4 + (1*73 + 78*7), over 100^2 = (815 + 619) / 10^4 = 0.1434
    assert row.kappa_w == pytest.approx(1 - 0.0675 / 0.1434) == pytest.approx(759 / 1434)
    # AC2: pa = 1 - 0.0675; pi = ((1+7)/200, (21+20)/200, (78+73)/200); the weights sum to 6 = k(k-1),
    # so pe = sum pi (1 - pi) = 0.04*0.96 + 0.205*0.795 + 0.755*0.245 = 0.38635
    assert row.ac2 == pytest.approx((0.9325 - 0.38635) / (1 - 0.38635))
    assert round(row.kappa_w, 2) == 0.53 and round(row.ac2, 2) == 0.89  # the paper's printed figures
    assert row.kappa_lo < row.kappa_w < row.kappa_hi and row.note == ""
    per = table.frame[table.frame["rubric"] != "all"]
    assert sorted(per["rubric"]) == sorted(RUBRIC_CATEGORIES) and per["n"].sum() == 100


def test_no_variance_says_so_instead_of_nan(bench, tmp_path):
    from metrobench.calibration.table import markdown, table1, write_table1

    sample = published_sample(bench)
    twos = {i: 2 for i in sample.ids}
    table = table1(sample, {"a": twos, "b": dict(twos)}, {}, n_resamples=100, seed=1)
    row = table.frame.iloc[0]
    assert row.note == "no variance: both raters gave every pair a 2; kappa is undefined"
    assert row.exact == 1.0 and row.ac2 == 1.0
    text = markdown(table)
    row_text = "| a vs b | 100 | 100 % | 100 % | no variance: both raters gave every pair a 2; kappa is undefined |"
    assert row_text + " 1.00 |" in text and "nan" not in text.lower()
    assert "n/a (no variance) (n=15)" in text
    assert "No judge (scoring.judge: none, no calibration.judges): people's agreement only." in text
    write_table1(table, tmp_path / "table1.csv")
    assert "nan" not in (tmp_path / "table1.csv").read_text().lower()


def test_with_one_rater_or_none_the_table_says_what_is_missing(bench):
    from metrobench.calibration.table import markdown, table1

    sample = published_sample(bench)
    _, judge = _paper_raters(sample)
    alone = table1(sample, {}, {"haiku": judge}, n_resamples=100, seed=1)
    assert alone.kind == "distribution"
    first = alone.frame.iloc[0]
    assert (first.rater, first.rubric, first.n, first.rated_0, first.rated_1, first.rated_2) == \
        ("haiku", "all", 100, 7, 20, 73)
    assert "the judge's rating distribution only; agreement needs people's ratings" in markdown(alone)
    nobody = table1(sample, {}, {}, n_resamples=100, seed=1)
    assert nobody.kind == "composition" and nobody.frame["n"].sum() == 100
    assert nobody.frame.iloc[0].to_dict() == {"rubric": "advisory_content_correct", "n": 15,
                                              "categories": "C:14 K:1", "systems": nobody.frame.iloc[0].systems}
    assert "the sample's composition only" in markdown(nobody)


def _config(tmp_path, api, ratings=()):
    path = tmp_path / "study.yaml"
    listed = ", ".join(f"'{r}'" for r in ratings)
    path.write_text(f"scoring: {{judge: anthropic, judge_url: '{api.url}'}}\n"
                    f"stats: {{n_resamples: 200}}\ncalibration: {{ratings: [{listed}]}}\n")
    return path


def test_table1_command_people_agreeing_with_the_judge_give_kappa_and_ac2_of_one(bench, tmp_path, api, capsys):
    import pandas as pd

    from metrobench.cli import main

    sample = tmp_path / "calibration" / "sample.json"
    assert main(["calibration-sample", "--data", str(bench.root), "--out", str(sample)]) == 0
    out, judged = tmp_path / "table1.csv", tmp_path / "calibration" / "judges.csv"
    # the judge's own ratings first (no people), then those ratings given back as a person's
    config = _config(tmp_path, api)
    args = ["table1", "--data", str(bench.root), "--config", str(config), "--sample", str(sample),
            "--out", str(out), "--judge-ratings", str(judged)]
    assert main(args) == 0
    assert "judge claude-haiku-4-5-20251001: 84 pairs judged (0 cached, 84 new), 16 scored without" \
        in capsys.readouterr().out
    assert (sample.parent / "judge-cache.jsonl").is_file()
    ratings = judged.read_text().replace("claude-haiku-4-5-20251001", "author")
    people = tmp_path / "author.csv"
    people.write_text(ratings)
    assert _config(tmp_path, api, [people]) == config  # the same file, now naming the person's ratings
    assert main(args) == 0
    frame = pd.read_csv(out)
    row = frame[frame["rubric"] == "all"].iloc[0]
    assert (row.rater_a, row.rater_b, row.n) == ("author", "claude-haiku-4-5-20251001", 100)
    assert row.kappa_w == 1.0 and row.ac2 == 1.0 and row.exact == 1.0
    md = out.with_suffix(".md").read_text()
    assert "| author vs claude-haiku-4-5-20251001 | 100 | 100 % | 100 % | 1.00 [1.00, 1.00] | 1.00 |" in md
    assert "Cases rewritten since the sample was drawn" in md and len(api.requests) == 84  # the cache served


@pytest.mark.parametrize("content,message", [
    ("id,author\n1,2\n101,1\n", "line 3: field id: '101' is not a pair id of the calibration sample"),
    ("id,author\n1,3\n", "line 2: pair 1: field author: '3' is not a rating (0, 1, 2, or blank for not rated)"),
    ("id,author\n1,two\n", "line 2: pair 1: field author: 'two' is not a rating"),
    ("id,author,author\n1,2,2\n", "line 1: rater column 'author' is duplicated (this file has it)"),
    ("id,claude-haiku-4-5-20251001\n1,2\n", "line 1: rater column 'claude-haiku-4-5-20251001' is duplicated "
                                            "(a judge has it)"),
    ("", "empty: a ratings CSV has a header"),
    ("id,author\n", "empty: a ratings CSV has a header"),
    ("id,author\n1,2\n1,1\n", "line 3: pair 1 is rated on an earlier line too"),
    ("id,author\n\u00b2,2\n", "line 2: field id: '\u00b2' is not a pair id of the calibration sample"),
])
def test_bad_ratings_are_one_error_line_and_nothing_written(bench, tmp_path, api, capsys, content, message):
    from metrobench.cli import main

    sample = tmp_path / "sample.json"
    assert main(["calibration-sample", "--data", str(bench.root), "--out", str(sample)]) == 0
    people = tmp_path / "people.csv"
    people.write_text(content)
    out = tmp_path / "table1.csv"
    capsys.readouterr()
    assert main(["table1", "--data", str(bench.root), "--config", str(_config(tmp_path, api, [people])),
                 "--sample", str(sample), "--out", str(out), "--judge-ratings", str(tmp_path / "j.csv")]) == 2
    err = capsys.readouterr().err
    assert err == f"metrobench: error: {people}: {message}" + err[len(f"metrobench: error: {people}: {message}"):]
    assert err.count("\n") == 1
    assert not out.exists() and not out.with_suffix(".md").exists() and not (tmp_path / "j.csv").exists()
    assert not api.requests  # refused before the judge is asked


def test_a_rater_column_in_two_files_is_refused(bench, tmp_path):
    from metrobench.calibration.table import read_people

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("id,author,second\n1,2,\n2,1,1\n")
    second.write_text("id,author\n1,2\n")
    assert read_people([first], [1, 2]) == {"author": {1: 2, 2: 1}, "second": {1: None, 2: 1}}
    duplicated = f"{second}: line 1: rater column 'author' is duplicated \\({first} has it\\)"
    with pytest.raises(MetrobenchError, match=duplicated):
        read_people([first, second], [1, 2])


# --- the workflow ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_table1_plans_in_the_paper_config_and_the_demo(tmp_path, root):
    from conftest import workflow_copy
    from test_workflow import BARE, job_counts, snakemake

    cwd = workflow_copy(tmp_path)
    paper = snakemake(cwd, "-n", "-p", "results/table1.csv", env=BARE)   # no data named: the pinned clone
    assert paper.returncode == 0, paper.stderr[-2000:]
    # the published sample needs no run: the data, the sample, the judges' ratings and the table
    assert job_counts(paper.stdout) == {"fetch_data": 1, "verify_data": 1, "calibration_sample": 1, "table1": 1}
    assert f"metrobench calibration-sample --data {layout.data_clone()}" in paper.stdout
    assert "--sample results/calibration/sample.json --out results/table1.csv" \
           " --judge-ratings results/calibration/judges.csv" in paper.stdout
    demo = snakemake(cwd, "-n", "results/table1.csv", "--configfile", "config/demo.yaml",
                     "--config", f"data={{path: {root}}}")
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert job_counts(demo.stdout) == {"verify_data": 1, "calibration_sample": 1, "table1": 1}
    # and the demo's `all` builds it (no judge there: the sample's composition, saying so)
    everything = snakemake(cwd, "-n", "--configfile", "config/demo.yaml", "--config", f"data={{path: {root}}}")
    assert everything.returncode == 0 and job_counts(everything.stdout)["table1"] == 1
    # a draw from a model's scored runs plans that model's runs and scores first
    select = snakemake(cwd, "-n", "results/table1.csv", "--configfile", "config/demo.yaml",
                       "--config", f"data={{path: {root}}}", "calibration={sample: select, model: rule-agent}")
    assert select.returncode == 0, select.stderr[-2000:]
    counts = job_counts(select.stdout)
    assert counts["run"] == 6 and counts["score"] == 1 and counts["table1"] == 1
    # the case viewer carries the sample's rating page
    view = snakemake(cwd, "-n", "-p", "results/view", "--configfile", "config/demo.yaml",
                     "--config", f"data={{path: {root}}}")
    assert view.returncode == 0, view.stderr[-2000:]
    assert job_counts(view.stdout)["calibration_sample"] == 1
    assert "--calibration results/calibration/sample.json --out results/view" in view.stdout


# --- the rating page -------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


def test_the_rating_page_holds_every_pair_escaped_and_blind(bench, tmp_path):
    from metrobench.viewer.calibrate import calibrate_page

    pairs = _published(bench)[:3]
    pairs[1]["model_response"] = "<script>document.body.setAttribute('data-pwned','1')</script>"
    page = calibrate_page(pairs, "abc123")
    assert page.count("<section class=\"pair hidden\"") == 3 and 'data-sample="abc123"' in page
    assert "&lt;script&gt;document.body.setAttribute(&#x27;data-pwned&#x27;,&#x27;1&#x27;)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # the page's own, allowed by its hash
    assert pairs[0]["rubric_question"].replace("'", "&#x27;") in page
    assert "_judge" not in page and "annotator_1_score" not in page


def test_the_viewer_site_carries_the_rating_page(bench, tmp_path, capsys):
    from metrobench.cli import main

    scores, runs = _scored_run(bench, tmp_path)
    sample = tmp_path / "sample.json"
    assert main(["calibration-sample", "--data", str(bench.root), "--out", str(sample)]) == 0
    out = tmp_path / "view"
    assert main(["view", "--data", str(bench.root), "--runs", str(runs), "--scores", str(scores),
                 "--calibration", str(sample), "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(", calibrate.html")
    page = (out / "calibrate.html").read_text()
    assert page.count('<section class="pair hidden"') == 100 and (out / "index.html").is_file()
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["view", "--data", str(bench.root), "--runs", str(runs), "--scores", str(scores),
                 "--calibration", str(bad), "--out", str(out)]) == 2
    assert "a calibration sample is a non-empty JSON list of pairs" in capsys.readouterr().err
    assert (out / "calibrate.html").read_text() == page  # the site is left as it was


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs the Debian chromium package (/usr/bin/chromium)")
def test_rating_three_pairs_in_headless_chromium_downloads_them_as_the_csv_table1_reads(bench, tmp_path):
    from cdp import Browser

    from metrobench.calibration.table import read_people
    from metrobench.viewer.calibrate import calibrate_page

    pairs = _published(bench)[:6]
    page = tmp_path / "calibrate.html"
    page.write_text(calibrate_page(pairs, "test-sample"))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with Browser(CHROMIUM, downloads) as browser:
        browser.open(page.as_uri(), "document.body.getAttribute('data-viewer') === 'ready'")
        shown = "Array.from(document.querySelectorAll('section.pair:not(.hidden)')).map(s => s.dataset.id).join()"
        assert browser.evaluate(shown) == "1"
        assert browser.evaluate("document.getElementById('progress').textContent") == "0 / 6 rated · pair 1 of 6"
        browser.evaluate("document.getElementById('rater').value = 'author'; "
                         "document.getElementById('rater').dispatchEvent(new Event('input'))")
        for key in ("2", "0", "1"):
            browser.press(key)
        assert browser.evaluate(shown) == "4"
        browser.press("ArrowLeft")  # back to pair 3: its rating shows
        assert browser.evaluate(shown) == "3"
        assert browser.evaluate("document.querySelector('section.pair[data-id=\"3\"] [data-given]').textContent") == "1"
        assert browser.evaluate("document.getElementById('progress').textContent") == "3 / 6 rated · pair 3 of 6"
        shot = os.environ.get("METROBENCH_CALIBRATE_SCREENSHOT")  # scripts/screenshots.sh calibrate
        if shot:
            browser.screenshot(Path(shot).resolve())
            assert Path(shot).stat().st_size > 10_000
        # kept in the browser: a reload starts at the first pair not rated, with the name and the ratings
        browser.open(page.as_uri(), "document.body.getAttribute('data-viewer') === 'ready'")
        assert browser.evaluate(shown) == "4" and browser.evaluate("document.body.dataset.rated") == "3"
        assert browser.evaluate("document.getElementById('rater').value") == "author"
        browser.evaluate("document.getElementById('download').click()")
        deadline = time.monotonic() + 60
        while not list(downloads.glob("*.csv")) and time.monotonic() < deadline:
            time.sleep(0.1)
    [saved] = list(downloads.glob("*.csv"))
    assert saved.name == "ratings-author.csv"
    assert saved.read_text() == "id,author\n1,2\n2,0\n3,1\n4,\n5,\n6,\n"
    assert read_people([saved], [p["id"] for p in pairs]) == {"author": {1: 2, 2: 0, 3: 1, 4: None, 5: None,
                                                                         6: None}}


def test_the_rehearsal_overlay_builds_table1_with_its_judge_stand_in_and_two_people(bench, tmp_path, monkeypatch,
                                                                                     capsys):
    """What `make rehearsal` builds for Table 1, without the rest of it: the paper config and the
    rehearsal overlay (its ratings fixture as the two people), the rehearsal's own API stand-in."""
    import pandas as pd

    from metrobench import rehearsal
    from metrobench.cli import main
    from metrobench.standins.openai_api import FakeOpenAI

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)  # the configs name their files relative to the workflow's folder
    for name, value in rehearsal.KEYS.items():
        monkeypatch.setenv(name, value)
    sample, out = tmp_path / "sample.json", tmp_path / "table1.csv"
    with FakeOpenAI(rehearsal.api_answer) as api:
        port = tmp_path / "port.yaml"
        port.write_text(f"scoring: {{judge_url: '{api.url}'}}\nstats: {{n_resamples: 200}}\n")
        configs = ["--config", "config/config.yaml", "--config", "config/rehearsal.yaml", "--config", str(port)]
        assert main(["calibration-sample", "--data", str(bench.root), *configs, "--out", str(sample)]) == 0
        assert main(["table1", "--data", str(bench.root), *configs, "--sample", str(sample), "--out", str(out),
                     "--judge-ratings", str(tmp_path / "judges.csv")]) == 0
        assert len(api.requests) == 84 and {r["path"] for r in api.requests} == {"/v1/messages"}
    frame = pd.read_csv(out)
    overall = frame[frame["rubric"] == "all"]
    judge = "claude-haiku-4-5-20251001"
    assert [f"{a} vs {b}" for a, b in zip(overall["rater_a"], overall["rater_b"])] == \
        ["author vs second", f"author vs {judge}", f"second vs {judge}"]
    assert (overall["n"] == 100).all()
    # the stand-in says 1 to every judged pair: on a rubric judged throughout, kappa_w is 0 and says why
    policy = frame[(frame["rubric"] == "policy_acknowledged") & (frame["rater_b"] == judge)]
    assert (policy["kappa_w"] == 0).all() and policy["note"].str.contains(
        f"{judge} gave every pair a 1, so kappa is 0 by construction").all()
    md = out.with_suffix(".md").read_text()
    assert "| author vs second | 100 |" in md and "Per-rubric κw" in md and "nan" not in md.lower()
    ratings = pd.read_csv(tmp_path / "judges.csv")
    assert list(ratings.columns) == ["id", judge] and (ratings[judge] == 1).sum() >= 84


def test_calibration_config_errors_name_the_field(tmp_path):
    from metrobench.study import load_study

    path = tmp_path / "c.yaml"
    path.write_text("calibration: {judges: [{judge: openai, url: 'http://127.0.0.1:9'}]}\n")
    with pytest.raises(MetrobenchError, match=r"field calibration\.judges\[0\]: .*an openai judge needs its model id"):
        load_study([path])
    path.write_text("calibration: {ratings: [a.csv, a.csv]}\n")
    with pytest.raises(MetrobenchError, match=r"calibration\.ratings.*listed more than once: a\.csv"):
        load_study([path])

"""The case viewer: rendering and escaping, the site of real runs, and a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.transcripts.records import CaseRecord, read_run
from metrobench.viewer.conversation import render_conversation
from metrobench.viewer.kiosk import render_terminal_state
from metrobench.viewer.load import CaseResult, ScoreRow
from metrobench.viewer.pages import case_page, render_scores

CHROMIUM = Path("/usr/bin/chromium")
EVIL = ("<script>document.body.setAttribute('data-pwned','script')</script>"
        "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">")


def record_with_calls() -> CaseRecord:
    """A runner-style record: messages with a tool call, a rejected submission, an accepted one."""
    bad = {"outcome": "route_and_fare_ready", "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"},
           "assistant_message": EVIL, "route": {"origin": "A", "destination": "B", "stops": ["A"]}}
    messages = [
        {"role": "system", "content": "You are the kiosk </details><b>x</b>"},
        {"role": "user", "content": "Origin: Airport"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "route_planner",
                                                          "arguments": json.dumps({"origin": "Airport"})}},
            {"id": "c2", "type": "function", "function": {"name": "submit_assistant_state",
                                                          "arguments": json.dumps(bad)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"route_id\": \"route_1\"}"},
        {"role": "tool", "tool_call_id": "c2", "content": "{\"error\": \"...\"}"},
    ]
    calls = [{"name": "route_planner", "arguments": {"origin": "Airport"}, "result": {"route_id": "route_1"},
              "error": None},
             {"name": "submit_assistant_state", "arguments": bad, "result": None,
              "error": "{\"detail\":\"Unknown station IDs in route.stops: ['A']\"}"}]
    response = {"outcome": "route_and_fare_ready", "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"},
                "ui_updates": {"route": {"origin": "Airport", "destination": "Five Points",
                                         "stops": [{"station_id": "MARTA-AP", "station_name": "Airport"}],
                                         "transfers": 0, "estimated_minutes": 17.6, "distance_miles": 8.79,
                                         "line_sequence": ["red"]},
                               "fare_quote": {"line_items": [{"rider_type": "adult", "count": 1, "subtotal": 2.5}],
                                              "discounts": [], "total": 2.5, "currency": "USD"},
                               "advisory_banners": [{"severity": "warning", "title": "Delays <b>",
                                                     "body": "Red line"}],
                               "assistant_message": EVIL}}
    return CaseRecord(case_id="MARTA-A-001", model="m", system="marta", response=response,
                      tool_calls_made=calls, messages=messages, api_rounds=2)


def test_conversation_shows_calls_results_and_the_422_feedback_escaped():
    html = render_conversation(record_with_calls(), [])
    assert "<details class=\"msg system\">" in html and "&lt;/details&gt;&lt;b&gt;x&lt;/b&gt;" in html
    assert "turn 1: user" in html and "Origin: Airport" in html
    assert html.count("class=\"call") == 2 and "route_planner" in html and "route_1" in html
    assert "422 feedback: submission rejected" in html and "Unknown station IDs" in html
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html


def test_terminal_state_as_the_kiosk_shows_it():
    html = render_terminal_state(record_with_calls())
    assert "Airport → Five Points" in html and "lines: red" in html and "adult ×1" in html
    assert "2.5 USD" in html and "banner warning" in html and "Delays &lt;b&gt;" in html
    assert "Buy ticket" in html and "<script>" not in html and "&lt;img src=x onerror=" in html
    plain = CaseRecord(case_id="X-A-001", raw_content="I cannot help <script>x</script>", response=None)
    assert "No accepted submission" in render_terminal_state(plain)
    assert "&lt;script&gt;x" in render_terminal_state(plain)
    odd = CaseRecord(case_id="X-A-001", response={"ui_updates": {"route": "nope", "fare_quote": [1],
                                                                 "advisory_banners": [None, 3]}})
    assert "kiosk" in render_terminal_state(odd)  # wrong shapes are skipped, never raised


def test_scores_and_case_page_escape_reasons_and_mark_failures():
    rows = [ScoreRow("route_correct", 1, 10.0, 10.0, False, "OK"),
            ScoreRow("fare_correct", 1, 0.0, 15.0, False, "expected 2.5 <got> 3"),
            ScoreRow("scope_adherence", 2, None, 5.0, True, "not judged")]
    case = CaseResult("m", "marta", "MARTA-A-001", "A", "holdout", rows, record=record_with_calls())
    assert case.failed == ["fare_correct"] and case.tier1_pct == 40.0 and case.composite_pct == 33.3
    html = render_scores(case)
    assert "<tr class=\"failed\" data-component=\"fare_correct\">" in html and "0 / 15" in html
    assert "&lt;got&gt;" in html and "class=\"unjudged\"" in html and "– / 5" in html
    page = case_page(case, has_compare=False)
    assert page.count("<script>") == 1 and "Content-Security-Policy" in page


@pytest.fixture(scope="module")
def runs(root, tmp_path_factory):
    """Rule-agent runs of MARTA under two names: rule-agent and a copy with one answer replaced."""
    base = tmp_path_factory.mktemp("viewer")
    run = base / "runs" / "rule-agent" / "marta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--out", str(run)]) == 0
    header, *lines = run.read_text().splitlines()   # the header, then the records
    first = json.loads(lines[0])
    first["model"] = "tampered"
    first["response"]["ui_updates"]["assistant_message"] = EVIL
    copy = base / "runs" / "tampered" / "marta.jsonl"
    copy.parent.mkdir(parents=True)
    tamper = [header, *lines[1:]]   # the header first (model renamed too), the tampered record second
    renamed = [ln.replace('"model":"rule-agent"', '"model":"tampered"') for ln in tamper]
    copy.write_text("\n".join([renamed[0], json.dumps(first), *renamed[1:]]) + "\n")
    for path in (run, copy):
        assert main(["score", "--data", str(root), "--run", str(path), "--out", str(base / "scores")]) == 0
    return base, first["case_id"]


def test_site_of_real_runs(runs, root, tmp_path, capsys):
    base, case_id = runs
    out = tmp_path / "site"
    assert main(["view", "--data", str(root), "--runs", str(base / "runs"), "--scores", str(base / "scores"),
                 "--model", "rule-agent", "--model", "tampered", "--out", str(out)]) == 0
    assert "2 model(s), 312 case pages, 156 side-by-side pages" in capsys.readouterr().out
    index = (out / "index.html").read_text()
    assert "models/rule-agent.html" in index and "compare/MARTA-A-001.html" in index
    model = (out / "models" / "rule-agent.html").read_text()
    assert "id=\"failed-filter\"" in model and "data-failed=\"framebook_conformance\"" in model
    page = (out / "cases" / "tampered" / f"{case_id}.html").read_text()
    # the rule agent's records carry their conversation (issue 42): drawn from it, nothing rebuilt
    assert "rebuilt from the case" not in page and "Airport to Five Points" in page
    assert "&lt;script&gt;document.body" in page and page.count("<script>") == 1
    # a user error is one line, status 2
    assert main(["view", "--runs", str(base / "runs"), "--scores", str(base / "scores"),
                 "--model", "nobody", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith("no scores of model nobody (scored: rule-agent, tampered)")


def test_the_index_names_models_by_their_leaderboard_labels(runs, root, tmp_path, capsys):
    """Issue 44: with the study config, the index shows Table 2's label and the model name beside it."""
    base, _ = runs
    config = tmp_path / "study.yaml"
    config.write_text("leaderboard:\n  - {model: rule-agent, label: \"Rule <baseline>\", reference: true}\n"
                      "  - {model: small-peft, label: Small + PEFT}\n"
                      "students:\n  small: {base_model: rule-agent, recipe: small.yaml, seeds: [42, 43]}\n")
    args = ["view", "--data", str(root), "--runs", str(base / "runs"), "--scores", str(base / "scores"),
            "--model", "rule-agent", "--model", "tampered"]
    assert main([*args, "--config", str(config), "--out", str(tmp_path / "site")]) == 0
    rows = re.findall(r"<tr><td>(.*?)</td>", (tmp_path / "site" / "index.html").read_text())
    assert rows == ['<a href="models/rule-agent.html">Rule &lt;baseline&gt;</a> <span class="note">rule-agent</span>',
                    '<a href="models/tampered.html">tampered</a>']   # no leaderboard row: the name alone
    assert main([*args, "--out", str(tmp_path / "plain")]) == 0      # no config: names only
    assert re.findall(r"<tr><td>(.*?)</td>", (tmp_path / "plain" / "index.html").read_text()) == [
        '<a href="models/rule-agent.html">rule-agent</a>', '<a href="models/tampered.html">tampered</a>']


def test_a_student_groups_seeds_and_a_models_repeats_take_its_label_with_the_seed_or_run():
    from metrobench.study import StudyConfig
    from metrobench.viewer.labels import leaderboard_labels
    from metrobench.viewer.pages import index_page

    config = StudyConfig.model_validate({
        "models": {"m": {"provider": "llama_cpp", "repeats": 2}, "n": {"provider": "llama_cpp"}},
        "students": {"small": {"base_model": "m", "recipe": "small.yaml", "seeds": [42, 43]}},
        "leaderboard": [{"model": "small-peft", "label": "Small + PEFT"}, {"model": "m", "label": "M"},
                        {"model": "n"}]})
    labels = leaderboard_labels(config)
    assert labels == {"small-peft-s42": "Small + PEFT (seed 42)", "small-peft-s43": "Small + PEFT (seed 43)",
                      "m": "M", "m-rep2": "M (run 2)"}
    index = index_page({"small-peft-s43": [], "n": []}, [], labels)
    assert re.findall(r"<tr><td>(.*?)</td>", index) == [
        '<a href="models/small-peft-s43.html">Small + PEFT (seed 43)</a> <span class="note">small-peft-s43</span>',
        '<a href="models/n.html">n</a>']


def test_view_never_replaces_a_folder_it_did_not_write(runs, tmp_path, capsys):
    base, _ = runs
    args = ["view", "--runs", str(base / "runs"), "--scores", str(base / "scores"), "--model", "rule-agent"]
    # `--out` naming the results themselves: refused, every run and score kept
    before = sorted(p.relative_to(base) for p in base.rglob("*"))
    assert main([*args, "--out", str(base)]) == 2
    err = capsys.readouterr().err.strip()
    first = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())[0]
    assert err == (f"metrobench: error: {base}: holds {first}, which `metrobench view` did not write: the "
                   "viewer replaces only its own files, so give a new or empty folder, or move that file out; "
                   "nothing was changed")
    assert sorted(p.relative_to(base) for p in base.rglob("*")) == before
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert main([*args, "--out", str(notes)]) == 2 and (notes / "todo.txt").read_text() == "mine"
    assert main([*args, "--out", str(notes / "todo.txt")]) == 2
    assert "--out must be a folder" in capsys.readouterr().err
    # a new folder, an empty one, and its own site again are fine; a page of its own no longer
    # written is deleted (a file of anyone else's is refused: tests/test_faults_round4_views.py)
    site, empty = tmp_path / "site", tmp_path / "empty"
    empty.mkdir()
    assert main([*args, "--out", str(empty)]) == 0 and (empty / ".metrobench-view").is_file()
    assert main([*args, "--model", "tampered", "--out", str(site)]) == 0
    assert (site / "models" / "tampered.html").is_file()
    assert main([*args, "--out", str(site)]) == 0 and not (site / "models" / "tampered.html").exists()


def test_a_lone_surrogate_in_a_recorded_reply_is_shown_as_its_escape(runs, tmp_path):
    shared, _ = runs
    base = tmp_path / "copy"          # the fixture is shared by the module: edit a copy, never it
    shutil.copytree(shared, base)
    run = base / "runs" / "tampered" / "marta.jsonl"
    header, *lines = run.read_text().splitlines()
    first = json.loads(lines[0])
    first["response"]["ui_updates"]["assistant_message"] = "before \ud800 after"   # JSON writes it as \\ud800
    run.write_text("\n".join([header, json.dumps(first), *lines[1:]]) + "\n")
    assert "\\ud800" in run.read_text()
    out = tmp_path / "site"
    assert main(["view", "--runs", str(base / "runs"), "--scores", str(base / "scores"), "--model", "tampered",
                 "--out", str(out)]) == 0
    assert "before \\ud800 after" in (out / "cases" / "tampered" / f"{first['case_id']}.html").read_text()


def test_site_of_a_reference_result_json(runs, root, tmp_path):
    base, _ = runs
    run = read_run(base / "runs" / "rule-agent" / "marta.jsonl")
    results = [json.loads(r.to_json()) for r in run.records[:5]]
    for r in results:
        del r["model"], r["system"]
    ref = tmp_path / "runs" / "reference" / "marta.json"
    ref.parent.mkdir(parents=True)
    ref.write_text(json.dumps({"metadata": {"llm_model": "reference", "system": "marta"}, "results": results}))
    scores = tmp_path / "scores"
    assert main(["score", "--data", str(root), "--run", str(ref), "--out", str(scores),
                 "--model", "reference"]) == 0
    assert main(["view", "--data", str(root), "--runs", str(tmp_path / "runs"), "--scores", str(scores),
                 "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "cases" / "reference" / f"{results[0]['case_id']}.html").read_text()
    assert "route_planner" in page and "route_correct" in page and "Buy ticket" in page


def chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        return subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120)


def dump_dom(page: Path) -> str:
    done = chromium("--dump-dom", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs the Debian chromium package (/usr/bin/chromium)")
def test_in_headless_chromium(runs, root, tmp_path):
    base, case_id = runs
    out = tmp_path / "site"
    assert main(["view", "--data", str(root), "--runs", str(base / "runs"), "--scores", str(base / "scores"),
                 "--model", "rule-agent", "--model", "tampered", "--out", str(out)]) == 0
    case = dump_dom(out / "cases" / "rule-agent" / f"{case_id}.html")
    assert re.search(r"<body[^>]*data-viewer=\"ready\"", case)  # the page's own script ran
    assert case.count("class=\"call") == 3 and "fare_calculator" in case and "422 feedback" in case
    assert re.search(r"data-component=\"fare_correct\"><td>fare_correct</td><td class=\"num\">1</td>"
                     r"<td class=\"num score\">15 / 15</td>", case)
    side = dump_dom(out / "compare" / f"{case_id}.html")
    assert re.search(r"<body[^>]*data-viewer=\"ready\"", side)
    assert "data-model=\"rule-agent\"" in side and "data-model=\"tampered\"" in side
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" in side
    assert "data-pwned=" not in side  # neither the injected script nor the onerror handler ran
    assert not re.search(r"<img[^>]*src=\"x\"", side)
    shot = os.environ.get("METROBENCH_VIEWER_SCREENSHOT")  # scripts/screenshots.sh viewer
    if shot:
        taken = chromium(f"--screenshot={Path(shot).resolve()}", "--window-size=1280,1000", "--hide-scrollbars",
                         (out / "compare" / f"{case_id}.html").resolve().as_uri())
        assert taken.returncode == 0 and Path(shot).stat().st_size > 10_000, taken.stderr[-2000:]

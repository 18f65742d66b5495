"""Fault drills, round 4 (issue 51): the viewer's folder, set-aside transcripts beside a view,
one model's settings across its systems, one selection per eval folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from metrobench.cli import main


@pytest.fixture(scope="module")
def scored(root, tmp_path_factory):
    """Rule-agent runs of MARTA under two names, scored: ``(base, view arguments)``."""
    base = tmp_path_factory.mktemp("round4")
    run = base / "runs" / "rule-agent" / "marta.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "marta", "--out", str(run)]) == 0
    copy = base / "runs" / "other" / "marta.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_text(run.read_text().replace('"model":"rule-agent"', '"model":"other"'))
    for path in (run, copy):
        assert main(["score", "--data", str(root), "--run", str(path), "--out", str(base / "scores")]) == 0
    return base, ["view", "--runs", str(base / "runs"), "--scores", str(base / "scores")]


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- item 1: the viewer deletes only what it wrote ---------------------------------------------------------

def test_a_users_file_in_the_site_folder_is_refused_by_name_and_kept(scored, tmp_path, capsys):
    """Before: the marker made the whole folder the viewer's, and a rebuild deleted notes.md, rc 0."""
    _, view = scored
    site = tmp_path / "site"
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    (site / "notes.md").write_text("my analysis")
    (site / "models" / "zz-mine.txt").write_text("mine too")
    before = _tree(site)
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 2
    err = _one_error(capsys)
    assert err.startswith(f"metrobench: error: {site}: holds models/zz-mine.txt, which `metrobench view` did not "
                          "write") and err.endswith("nothing was changed")
    assert _tree(site) == before


def test_a_site_copied_into_a_web_folder_with_its_manifest_is_refused(scored, tmp_path, capsys):
    """``cp -a site/. www/``: the manifest travels, but it does not list the web folder's own files."""
    _, view = scored
    site, www = tmp_path / "site", tmp_path / "www"
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    www.mkdir()
    (www / "about.html").write_text("the web folder's own page")
    shutil.copytree(site, www, dirs_exist_ok=True)
    before = _tree(www)
    assert main([*view, "--model", "rule-agent", "--out", str(www)]) == 2
    assert f"{www}: holds about.html, which `metrobench view` did not write" in _one_error(capsys)
    assert _tree(www) == before


def test_a_page_edited_since_it_was_written_is_refused(scored, tmp_path, capsys):
    _, view = scored
    site = tmp_path / "site"
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    (site / "index.html").write_text("my own index")
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 2
    assert f"{site}: index.html was changed since `metrobench view` wrote it" in _one_error(capsys)
    assert (site / "index.html").read_text() == "my own index"


def test_a_rebuild_deletes_its_own_pages_no_longer_written_and_keeps_the_folder(scored, tmp_path):
    _, view = scored
    site = tmp_path / "site"
    assert main([*view, "--model", "rule-agent", "--model", "other", "--out", str(site)]) == 0
    assert (site / "cases" / "other").is_dir() and any((site / "compare").iterdir())
    inode = site.stat().st_ino
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    assert not (site / "cases" / "other").exists() and not (site / "compare").exists()
    assert not (site / "models" / "other.html").exists()
    assert site.stat().st_ino == inode                       # the folder itself is kept, never swapped
    manifest = json.loads((site / ".metrobench-view").read_text())
    listed = set(manifest["files"])
    assert listed == set(_tree(site)) - {".metrobench-view"}
    # the manifest lets the next rebuild run again (no file of its own is "foreign")
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0


def test_view_out_dot_is_one_line_or_a_site_in_place(scored, tmp_path, capsys, monkeypatch):
    """Before: ``view --out .`` was a traceback (the folder ``.`` has no name to swap)."""
    _, view = scored
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "README.md").write_text("a project")
    monkeypatch.chdir(busy)
    assert main([*view, "--model", "rule-agent", "--out", "."]) == 2
    assert "holds README.md, which `metrobench view` did not write" in _one_error(capsys)
    assert (busy / "README.md").read_text() == "a project"
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main([*view, "--model", "rule-agent", "--out", "."]) == 0
    assert (empty / "index.html").is_file() and os.getcwd() == str(empty)
    assert main([*view, "--model", "rule-agent", "--out", "."]) == 0


def test_an_older_viewers_marker_owns_the_sites_pages_only(scored, tmp_path, capsys):
    _, view = scored
    site = tmp_path / "site"
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    (site / ".metrobench-view").write_text("written by metrobench view; a rebuild replaces this folder\n")
    (site / "models" / "gone.html").write_text("a page of the older site")
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    assert not (site / "models" / "gone.html").exists()
    (site / ".metrobench-view").write_text("written by metrobench view; a rebuild replaces this folder\n")
    (site / "draft.txt").write_text("mine")
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 2
    assert "holds draft.txt" in _one_error(capsys) and (site / "draft.txt").is_file()


def test_a_killed_builds_staging_folder_is_neither_foreign_nor_kept(scored, tmp_path):
    _, view = scored
    site = tmp_path / "site"
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    dead = site / ".site.999999999.tmp"                    # no such process
    (dead / "models").mkdir(parents=True)
    (dead / "models" / "half.html").write_text("half a page")
    assert main([*view, "--model", "rule-agent", "--out", str(site)]) == 0
    assert not dead.exists()


# -- item 7: set-aside transcripts beside a view are not systems ----------------------------------------------

def _set_aside_beside(run: Path, *, config: str = "0ld5e771n95abcd") -> Path:
    """A copy of ``run`` renamed as ``--set-aside`` names it, made under another settings fingerprint."""
    lines = []
    for line in run.read_text().splitlines():
        item = json.loads(line)
        if "header" in item:
            item["header"]["config"] = config
        else:
            item.setdefault("meta", {})["config"] = config
        lines.append(json.dumps(item))
    aside = run.with_name(f"{run.stem}.{config}.jsonl")
    aside.write_text("\n".join(lines) + "\n")
    return aside


@pytest.fixture
def with_set_aside(scored, tmp_path):
    base, _ = scored
    runs = tmp_path / "runs"
    shutil.copytree(base / "runs", runs)
    _set_aside_beside(runs / "rule-agent" / "marta.jsonl")
    return runs


def test_the_protocol_table_counts_a_views_cases_not_its_set_asides(with_set_aside):
    """Before: 312 cases (the view's 156 and the set-aside's 156)."""
    from metrobench.paper.tables import protocol

    frame = protocol(with_set_aside, ["rule-agent"])
    assert frame["cases"].tolist() == [156]


def test_table2s_settings_check_ignores_a_set_aside(with_set_aside):
    """Before: "its runs disagree on their settings: settings fingerprint ... within marta.<fp>" for ever."""
    from metrobench.paper.run_settings import check_runs_agree, model_runs

    assert [system for system, _ in model_runs(with_set_aside, "rule-agent")] == ["marta"]
    check_runs_agree(with_set_aside, ["rule-agent"])


def test_a_folder_of_set_asides_only_has_no_transcripts(with_set_aside):
    from metrobench.paper.tables import Skip, protocol

    (with_set_aside / "rule-agent" / "marta.jsonl").unlink()
    with pytest.raises(Skip, match="no transcripts under .* for rule-agent"):
        protocol(with_set_aside, ["rule-agent"])


def test_the_viewer_reads_a_set_aside_as_no_system(with_set_aside, tmp_path):
    from metrobench.viewer.load import run_files

    assert set(run_files(with_set_aside)) == {("rule-agent", "marta"), ("other", "marta")}
    flat = tmp_path / "eval" / "rule-agent" / "runs"       # an eval's folder: its views directly in runs/
    flat.mkdir(parents=True)
    shutil.copy(with_set_aside / "rule-agent" / "marta.jsonl", flat / "marta.jsonl")
    _set_aside_beside(flat / "marta.jsonl")
    (flat / "notes.jsonl").write_text("{}\n")
    assert set(run_files(flat)) == {("rule-agent", "marta")}


# -- item 6: one model, one served file (and every other compared serving field) across its systems -----------

def _records(system: str, serving: dict, n: int = 2, config: str = "fp1") -> tuple[str, list]:
    from metrobench.transcripts.records import CaseRecord

    settings = {"temperature": 0.0, "max_tokens": 4096}
    return system, [CaseRecord(case_id=f"{system.upper()}-A-00{i}", model="m", system=system,
                               meta={"settings": settings, "config": config, "serving": dict(serving)})
                    for i in range(1, n + 1)]


SERVED = {"server": "llama.cpp", "gguf": "m-Q4_K_M.gguf", "gguf_sha256": "a" * 64, "n_ctx": 8192,
          "ctx_per_slot": 8192, "parallel": 1, "flash_attn": True, "n_gpu_layers": 99}


def test_table2_refuses_one_model_served_from_two_gguf_files_of_one_name():
    """Before: None (the fingerprint holds the file's name, not its content)."""
    from metrobench.paper.run_settings import disagreement

    requantised = {**SERVED, "gguf_sha256": "b" * 64}
    assert disagreement("m", [_records("bart", SERVED), _records("marta", requantised)]) == (
        "model m: its runs disagree on their settings: GGUF file (SHA-256) aaaaaaaaaaaaaaaa on bart, "
        "bbbbbbbbbbbbbbbb on marta; rerun the model's runs under one config (the workflow reruns a changed "
        "model's runs; `metrobench bench --set-aside` keeps the old ones)")
    assert "slots 1 on bart, 2 on marta" in disagreement("m", [_records("bart", SERVED),
                                                               _records("marta", {**SERVED, "parallel": 2})])
    hosted = {"dialect": "openai", "deployment": "gpt-x", "api_version": None}
    assert "deployment gpt-x on bart, gpt-y on marta" in disagreement(
        "m", [_records("bart", hosted), _records("marta", {**hosted, "deployment": "gpt-y"})])


def test_a_serving_field_one_record_lacks_is_not_compared_but_the_rest_still_are():
    from metrobench.paper.run_settings import disagreement

    older = {k: v for k, v in SERVED.items() if k != "gguf_sha256"}     # made before the digest was recorded
    assert disagreement("m", [_records("bart", older), _records("marta", SERVED)]) is None
    assert disagreement("m", [_records("bart", SERVED), _records("marta", SERVED)]) is None
    changed = {**SERVED, "gguf_sha256": "c" * 64}
    problem = disagreement("m", [_records("bart", older), _records("doha", SERVED), _records("marta", changed)])
    assert problem and "GGUF file (SHA-256) aaaaaaaaaaaaaaaa on doha, cccccccccccccccc on marta" in problem


# -- item 2: a view and its scores belong to one selection ---------------------------------------------------

def test_an_eval_scores_its_own_selection_when_another_eval_of_the_model_cuts_meanwhile(root, tmp_path, capsys,
                                                                                        monkeypatch):
    """Before: ``eval --sample 8`` scored and summarised the 2 marta cases another eval (``--sample 2``)
    cut into the shared ``runs/marta.jsonl`` while its doha ran, rc 0."""
    import metrobench.commands.runs as runs_module
    from metrobench.standins.openai_api import FakeOpenAI, chat_payload
    from metrobench.transcripts.records import read_run

    results = tmp_path / "results"
    folder = results / "eval" / "mine"

    def evaluate(url: str, systems: str, sample: str) -> int:
        return main(["eval", "--data", str(root), "--model", "mine", "--provider", "openai", "--base-url",
                     f"{url}/v1", "--system", systems, "--partition", "all", "--sample", sample,
                     "--concurrency", "1", "--results", str(results)])

    declined = chat_payload('{"outcome": "request_declined"}')
    with FakeOpenAI(lambda request: declined) as api:
        assert evaluate(api.url, "marta", "2") == 0               # the other eval's marta view: 2 cases
        theirs = (folder / "runs" / "marta.jsonl").read_bytes()
        real = runs_module.cmd_run

        def run_then_the_other_eval_cuts(args):
            done = real(args)
            if args.system == "doha":                          # while this eval's doha ran
                (folder / "runs" / "marta.jsonl").write_bytes(theirs)
            return done

        monkeypatch.setattr(runs_module, "cmd_run", run_then_the_other_eval_cuts)
        capsys.readouterr()
        assert evaluate(api.url, "marta,doha", "8") == 0
    out = capsys.readouterr().out
    assert "model mine | partition full | 16 cases" in out
    assert len(read_run(folder / "runs" / "marta.jsonl").records) == 8
    data = json.loads((folder / "results.json").read_text())
    assert {system: run["cases"] for system, run in data["runs"].items()} == {"marta": 8, "doha": 8}
    assert not list(folder.glob(".pending.*"))                  # its own views' folder is gone

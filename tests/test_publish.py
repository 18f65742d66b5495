"""``metrobench publish``: the folder and card written from the study's own files, and the push to the hub stand-in.

The study is a tiny one written here (Table 4 and 8's CSVs, one student's training and
export files, synthetic scores), not the demo run: the card's every figure is checked
against those files, and the push against :class:`~metrobench.standins.hf_hub.FakeHub`.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from metrobench import layout
from metrobench.cli import main
from metrobench.paper.inputs import Model, Resampling
from metrobench.paper.tables import table9
from metrobench.scoring.store import read_scores
from metrobench.standins.hf_hub import FakeHub
from metrobench.stats.cases import load_case_scores
from test_tables import _write_parquet, synthetic_table

SENTINEL = "hf_SENTINEL_never_shown_0123456789"
COMMIT = "c" * 40
TABLE4 = ("size,base_tier1,s42,s43,mean,delta,seed_spread,delta_full,q4_k_m_gguf_bytes,published_s42\n"
          "small,100.0,65.0,85.0,75.0,-25.0,10.0,-10.0,1000,91.82\n")
TABLE8 = ("size,max_seq,minutes_per_seed,adapter_bytes,adapter_params,adapter_dtypes,paper_adapter_bytes,"
          "q4_k_m_gguf_bytes,gguf_llama_cpp,seeds\nsmall,2048,12.5,150,25,float32,,1000,b8642 (commit 1a2b),2\n")


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


@pytest.fixture
def study(tmp_path: Path, monkeypatch) -> Path:
    """A study config over a results folder holding what publishing student small-peft-s42 reads."""
    results = tmp_path / "results"
    config = {"results": str(results),
              "models": {"m2": {"provider": "scripted"}, "pub": {"provider": "openai", "model": "x",
                                                                "base_url": "http://127.0.0.1:1/v1",
                                                                "serving": {"gguf": "models/Pub-Q4_K_M.gguf"}}},
              "students": {"small": {"base_model": "m2", "recipe": "small.yaml", "seeds": [42, 43],
                                     "published": "pub"}},
              "leaderboard": [{"model": "m2", "licence": "Apache 2.0"}],
              "downloads": {"lock": str(tmp_path / "models.lock.yaml"),
                            "gguf": {"models/Pub-Q4_K_M.gguf": {"repo": "paper/Pub", "file": "Pub-Q4_K_M.gguf"}}}}
    _write(tmp_path / "study.yaml", yaml.safe_dump(config))
    root = str(results)
    _write(Path(layout.table_path("table4", root)), TABLE4)
    _write(Path(layout.table_path("table8", root)), TABLE8)
    _write(Path(layout.quantized_gguf("small", 42, root)), b"GGUF" + bytes(96))
    _write(Path(layout.gguf_sizes("small", 42, root)), json.dumps({"model-Q4_K_M.gguf": 100,
                                                                   "llama_cpp": "b8642 (commit 1a2b)"}))
    adapter = Path(layout.adapter_dir("small", 42, root))
    _write(adapter / "adapter_model.safetensors", b"\0" * 150)
    _write(adapter / "tokenizer.json", "{}")
    _write(Path(layout.train_metrics("small", 42, root)), json.dumps(
        {"base": "Org/Base-2B", "seed": 42, "recipe": {"base": "Org/Base-2B", "max_length": 2048, "lr": 2e-4},
         "versions": {"torch": "2.9.0", "peft": "0.17.0"}, "steps": 3, "wall_s": 750.0}))
    _write(Path(layout.teacher_dataset(root)), '{"messages": []}\n')
    _write(Path(layout.teacher_composition(root)), "category,kept\nA,3\n")
    scores = Path(layout.scores_root("holdout", layout.TIER1, root))
    _write_parquet(synthetic_table({"small-peft-s42": ((50, 60, 70, 80), 90, 0, ())}), scores)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path


def _publish(study: Path, *extra: str) -> int:
    return main(["publish", "--config", str(study / "study.yaml"), "--size", "small", "--seed", "42", *extra])


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])", text))


def test_dry_run_writes_the_folder_and_a_card_of_the_studys_figures(study, capsys):
    assert _publish(study) == 0
    out = study / "results" / "publish" / "small" / "seed42"
    listed = capsys.readouterr().out
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["Base-2B-metro-s42-Q4_K_M.gguf", "README.md", "adapter/adapter_model.safetensors",
                     "adapter/tokenizer.json", "adapter/train_metrics.json", "training_summary.json"]
    for name in files:
        assert re.search(rf"^\s+{(out / name).stat().st_size}  {re.escape(name)}$", listed, re.M)
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["base_model"] == "Org/Base-2B" and meta["license"] == "apache-2.0"
    assert meta["library_name"] == "peft" and "gguf" in meta["tags"]
    # the figures: Table 4's and 8's cells as written, the seed's delta, and Table 9's statistic on the scores
    row4 = next(csv.DictReader(TABLE4.splitlines()))
    row8 = next(csv.DictReader(TABLE8.splitlines()))
    cases = load_case_scores(read_scores(study / "results" / "scores" / "tier1" / "holdout"))
    t9 = table9(cases, [Model.single("small-peft-s42")], Resampling(10_000, 42), "holdout")
    t9 = t9[t9["statistic"] == "headline"].iloc[0]
    by_system = {s: round(v, 2) for s, v in cases.headline("small-peft-s42", "holdout").tier1_by_system.items()}
    expected = ({v for k, v in row4.items() if k not in ("size", "delta_full")}
                | {v for k, v in row8.items() if k in ("max_seq", "minutes_per_seed", "adapter_bytes",
                                                         "q4_k_m_gguf_bytes")}
                | {f"{float(row4['s42']) - float(row4['base_tier1']):+.2f}"}
                | {str(t9[k]) for k in ("n", "tier1_lo", "tier1_hi", "composite", "composite_lo", "composite_hi")}
                | {str(v) for v in by_system.values()}
                | {"42", "95", "2", "1", "2048", "8642", "8", "9", "2.0"})  # seed, labels (95 % CI, Table 8/9, b8642)
    body = card.split("---\n", 2)[2]
    assert _numbers(body) <= expected, _numbers(body) - expected
    assert "91.82" in body and "paper/Pub" in body          # the released student's row beside it
    assert f"[{t9['tier1_lo']}, {t9['tier1_hi']}]" in body
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["seed"] == 42 and summary["recipe"]["lr"] == 2e-4
    assert summary["trainer_versions"] == {"torch": "2.9.0", "peft": "0.17.0"}
    assert summary["converter"] == "b8642 (commit 1a2b)"
    assert summary["training_set"]["composition"] == [{"category": "A", "kept": "3"}]
    assert len(summary["training_set"]["sha256"]) == 64


def test_a_figure_the_study_has_not_produced_is_left_out(study):
    (study / "results" / "table8.csv").unlink()
    import shutil
    shutil.rmtree(study / "results" / "scores")
    assert _publish(study) == 0
    card = (study / "results" / "publish" / "small" / "seed42" / "README.md").read_text()
    assert "Table 8" not in card and "CI" not in card and "per system" not in card


@pytest.mark.parametrize("broken, words", [
    (lambda s: (s / "results" / "table4.csv").write_text(TABLE4.replace(",65.0,", ",,")), "no Table 4 row"),
    (lambda s: (s / "results" / "table4.csv").unlink(), "no Table 4 row"),
    (lambda s: (s / "results" / "peft" / "small" / "seed42" / "gguf_sizes.json").unlink(), "no load-checked"),
    (lambda s: (s / "results" / "peft" / "small" / "seed42" / "model-Q4_K_M.gguf").unlink(), "no load-checked"),
])
def test_an_incomplete_chain_is_refused_in_one_line(study, capsys, broken, words):
    broken(study)
    assert _publish(study) == 2
    err = capsys.readouterr().err
    assert err.startswith("metrobench: error: publish: student small-peft-s42: " + words) and err.count("\n") == 1


def test_push_without_a_token_is_refused(study, capsys):
    assert _publish(study, "--push", "--repo", "me/Base-2B-metro-s42") == 2
    assert "no hub token: set HF_TOKEN" in capsys.readouterr().err


def _everything_written(root: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in root.rglob("*") if p.is_file())


def test_push_to_the_stand_in_leaves_exactly_the_listed_files(study, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    with FakeHub({"me/Old": {"x.txt": b"old"}}, COMMIT) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert _publish(study, "--push", "--repo", "me/Base-2B-metro-s42") == 2
        assert "does not exist on the hub; --create" in capsys.readouterr().err
        assert _publish(study, "--push", "--repo", "me/Base-2B-metro-s42", "--create") == 0
        out = capsys.readouterr().out
        folder = study / "results" / "publish" / "small" / "seed42"
        listed = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        assert sorted(hub.repos["me/Base-2B-metro-s42"]) == listed
        assert all(hub.repos["me/Base-2B-metro-s42"][n] == (folder / n).read_bytes() for n in listed)
        [(repo, oid, _)] = hub.commits
        record = json.loads((study / "results" / "publish" / "small" / "seed42.push.json").read_text())
        assert (record["repo"], record["commit"], sorted(record["files"])) == (repo, oid, listed)
        assert oid in out
        # a repo holding other files: refused without --update, replaced (one commit) with it
        assert _publish(study, "--push", "--repo", "me/Old") == 2
        assert "already holds 1 file(s)" in capsys.readouterr().err
        assert _publish(study, "--push", "--repo", "me/Old", "--update") == 0
        assert sorted(hub.repos["me/Old"]) == sorted(n.replace("Base-2B-metro-s42", "Old") for n in listed)
        assert len(hub.commits) == 2
        assert hub.authorized            # the token was sent ...
    captured = capsys.readouterr()
    assert SENTINEL not in out + captured.out + captured.err   # ... and never shown or written
    assert SENTINEL not in _everything_written(study)


def test_a_folder_holding_the_users_files_is_refused_and_nothing_deleted(tmp_path):
    from metrobench.errors import MetrobenchError
    from metrobench.publish.bundle import _clear

    out = tmp_path / "seed42"
    out.mkdir()
    (out / "README.md").write_text("an old card")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(MetrobenchError, match="holds notes.txt, which publish did not write"):
        _clear(out, {"README.md", "adapter"})
    assert (out / "notes.txt").read_text() == "mine" and (out / "README.md").exists()
    (out / "notes.txt").unlink()
    _clear(out, {"README.md", "adapter"})
    assert list(out.iterdir()) == []

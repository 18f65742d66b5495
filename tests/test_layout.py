"""metrobench.layout: the naming rules and the paths the workflow and the commands share."""

from __future__ import annotations

from metrobench import layout

SEEDS = {"4b": [42, 43], "27b-corrected": [7]}


def test_student_names_groups_and_members():
    assert layout.student_name("4b", 42) == "4b-peft-s42"
    assert layout.student_group("27b-corrected") == "27b-corrected-peft"
    assert layout.student_models(SEEDS) == ["4b-peft-s42", "4b-peft-s43", "27b-corrected-peft-s7"]
    # a group expands to its seeds in config order; anything else (one seed, a base, an unknown
    # size's "group") stays as named
    assert layout.members(SEEDS, ["4b-peft", "qwen3.5-4b", "27b-corrected-peft-s7", "9b-peft"]) == [
        "4b-peft-s42", "4b-peft-s43", "qwen3.5-4b", "27b-corrected-peft-s7", "9b-peft"]
    assert layout.members({}, ["4b-peft"]) == ["4b-peft"]


def test_student_of_inverts_the_name_only_for_configured_seeds():
    assert layout.student_of(SEEDS, "4b-peft-s43") == ("4b", 43)
    assert layout.student_of(SEEDS, "27b-corrected-peft-s7") == ("27b-corrected", 7)
    assert layout.student_of(SEEDS, "4b-peft-s44") is None      # not a configured seed
    assert layout.student_of(SEEDS, "4b-peft") is None          # a group, not one model
    assert layout.student_of(SEEDS, "qwen3.5-4b") is None


def test_paths_of_one_seed_and_of_runs_scores_and_tables():
    assert layout.peft_dir("4b", 42) == "results/peft/4b/seed42"
    assert layout.adapter_dir("4b", 42) == "results/peft/4b/seed42/adapter"
    assert layout.merged_dir("4b", 42) == "results/peft/4b/seed42/merged"
    assert layout.f16_gguf("4b", 42) == "results/peft/4b/seed42/model-f16.gguf"
    assert layout.quantized_gguf("4b", 42) == "results/peft/4b/seed42/model-Q4_K_M.gguf"
    assert layout.gguf_sizes("4b", 42, "out") == "out/peft/4b/seed42/gguf_sizes.json"
    assert layout.train_metrics("4b", 42, "out") == "out/peft/4b/seed42/adapter/train_metrics.json"
    # wildcards pass through as patterns, as Snakemake's rules give them
    assert layout.peft_dir("{size}", "{seed}") == "results/peft/{size}/seed{seed}"
    assert layout.work_path("{model}", "marta") == "results/work/{model}/marta.jsonl"
    assert layout.run_path("{model}", "marta", "{partition}") == "results/runs/{partition}/{model}/marta.jsonl"
    assert layout.scores_path("m", "bart", "all") == "results/scores/tier2/all/model=m/system=bart/part.parquet"
    assert layout.scores_path("m", "bart", "holdout", layout.TIER1) == \
        "results/scores/tier1/holdout/model=m/system=bart/part.parquet"
    assert layout.summary_path("m") == "results/summary/m.txt"
    assert layout.table_path("table2") == "results/table2.csv"
    assert layout.table_path("figure2", "out", ".png") == "out/figure2.png"
    assert layout.teacher_composition() == "results/teacher/composition.csv"

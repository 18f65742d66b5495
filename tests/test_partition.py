"""The partition reproduces the committed split, byte-identically across reruns."""

from __future__ import annotations

import json

import pytest

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.data.partition import build_partition, committed_split, partition_benchmark, case_key


def test_partition_equals_committed_split_except_timestamp(bench):
    document = partition_benchmark(bench, warn=lambda _: None)
    committed = committed_split(bench)
    committed.pop("created_utc")
    assert document == committed
    assert len(document["train_ids"]) == 717 and len(document["holdout_ids"]) == 238


def test_cli_partition_is_byte_identical_on_rerun(root, tmp_path, capsys):
    first, second = tmp_path / "a" / "partition.json", tmp_path / "partition.json"
    assert main(["partition", "--data", str(root), "--out", str(first)]) == 0
    assert main(["partition", "--data", str(root), "--out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    assert "created_utc" not in json.loads(first.read_text())
    assert "717 train / 238 held-out" in capsys.readouterr().out


def test_other_seed_gives_another_valid_split(bench):
    keys = [case_key(c) for s in ("marta", "doha", "bart", "taipei", "cta", "beijing") for c in bench.cases(s)]
    other = build_partition(keys, seed=7, warn=lambda _: None)
    default = build_partition(keys, warn=lambda _: None)
    assert other["holdout_ids"] != default["holdout_ids"]
    assert set(default["pinned_gap_audit"]) <= set(other["holdout_ids"])


def test_missing_pinned_case_is_fatal(bench):
    keys = [case_key(c) for c in bench.cases("marta")]
    with pytest.raises(MetrobenchError, match="pinned held-out case"):
        build_partition(keys, expected_total=None)

"""Pinned model downloads (metrobench fetch-model) against a local fake of the Hugging Face Hub's HTTP API."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_hf_hub import FakeHub
from metrobench.downloads import check_downloads

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GGUF = b"GGUF" + bytes(range(256)) * 64
BASE = {"config.json": b'{"model_type": "qwen3_5_text"}', "model-00001-of-00001.safetensors": b"weights",
        "tokenizer.json": b"{}", "model-visual-00001.safetensors": b"vision", "mtp.safetensors": b"mtp"}


def fetch(tmp_path: Path, hub: FakeHub, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1",
               HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run([sys.executable, "-m", "metrobench", "fetch-model", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def hub():
    with FakeHub({"acme/Qwen3.5-2B-GGUF": {"Qwen3.5-2B-Q8_0.gguf": GGUF}, "acme/Qwen3.5-2B": BASE},
                 COMMIT) as server:
        yield server


def test_gguf_is_fetched_at_the_pinned_revision_and_checked(tmp_path, hub):
    sha = hashlib.sha256(GGUF).hexdigest()
    args = ["--repo", "acme/Qwen3.5-2B-GGUF", "--file", "Qwen3.5-2B-Q8_0.gguf", "--revision", COMMIT,
            "--gguf", "models/Qwen3.5-2B-Q8_0.gguf"]
    done = fetch(tmp_path, hub, *args, "--sha256", sha)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models" / "Qwen3.5-2B-Q8_0.gguf").read_bytes() == GGUF
    assert f"GET /acme/Qwen3.5-2B-GGUF/resolve/{COMMIT}/Qwen3.5-2B-Q8_0.gguf" in hub.requests
    # in the standard cache layout too
    assert list((tmp_path / "hf" / "hub" / "models--acme--Qwen3.5-2B-GGUF" / "snapshots" / COMMIT).iterdir())

    wrong = fetch(tmp_path, hub, *args[:-1], "models/other.gguf", "--sha256", "f" * 64)
    assert wrong.returncode == 2 and not (tmp_path / "models" / "other.gguf").exists()
    line = wrong.stderr.strip().splitlines()[-1]
    assert line.startswith("metrobench: error: models/other.gguf: SHA-256 of acme/Qwen3.5-2B-GGUF/") and sha in line
    assert "Traceback" not in wrong.stderr

    moved = fetch(tmp_path, hub, *args[:6], "--revision", "f" * 40, "--gguf", "models/x.gguf", "--sha256", sha)
    assert moved.returncode == 2 and moved.stderr.startswith("metrobench: error: models/x.gguf: cannot download")
    unpinned = fetch(tmp_path, hub, *args[:6], "--revision", "main", "--gguf", "models/x.gguf", "--sha256", sha)
    assert unpinned.returncode == 2 and "field revision: 'main' is not a 40-hex commit" in unpinned.stderr


def test_base_weights_skip_vision_and_mtp_into_the_hf_cache(tmp_path, hub):
    done = fetch(tmp_path, hub, "--repo", "acme/Qwen3.5-2B", "--revision", COMMIT, "--stamp", "stamp.json")
    assert done.returncode == 0, done.stderr
    stamp = json.loads((tmp_path / "stamp.json").read_text())
    assert stamp["files"] == ["config.json", "model-00001-of-00001.safetensors", "tokenizer.json"]
    snapshot = tmp_path / "hf" / "hub" / "models--acme--Qwen3.5-2B" / "snapshots" / COMMIT
    assert Path(stamp["folder"]) == snapshot and (snapshot / "config.json").is_file()
    assert not any("visual" in r or "mtp" in r for r in hub.requests if r.startswith("GET /acme"))

    # train/merge find the snapshot offline (resolve_base with the pinned revision)
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    code = ("from metrobench.training.base import resolve_base; "
            f"print(resolve_base('acme/Qwen3.5-2B', '{COMMIT}'))")
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(snapshot), found.stderr


def test_config_entries_lacking_fields_are_named():
    sha = "a" * 64
    assert check_downloads({"gguf": {"models/a.gguf": {"repo": "r", "file": "a.gguf", "revision": COMMIT,
                                                       "sha256": sha}},
                            "bases": {"Qwen/Qwen3.5-2B": {"revision": COMMIT}}}) == []
    problems = check_downloads({"gguf": {"models/a.gguf": {"repo": "r", "file": "a.gguf", "revision": COMMIT}},
                                "bases": {"Qwen/Qwen3.5-2B": {}}}, "config/config.yaml")
    assert problems == [
        "config/config.yaml: downloads.gguf[models/a.gguf]: field sha256 missing (every GGUF needs repo, file, "
        "revision, sha256)",
        "config/config.yaml: downloads.bases[Qwen/Qwen3.5-2B]: field revision missing (a base is fetched at a "
        "pinned commit)"]

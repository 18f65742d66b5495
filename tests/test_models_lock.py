"""Models by name: `metrobench lock` and `metrobench fetch-model` against a local stand-in of the hub's HTTP API."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from metrobench.standins.hf_hub import FakeHub

COMMIT = "0123456789abcdef0123456789abcdef01234567"
NEWER = "89abcdef0123456789abcdef0123456789abcdef"
GGUF = b"GGUF" + bytes(range(256)) * 64
BASE = {"config.json": b'{"model_type": "qwen3_5_text"}', "model-00001-of-00001.safetensors": b"weights" * 50,
        "tokenizer.json": b"{}", "model-visual-00001.safetensors": b"vision", "mtp.safetensors": b"mtp"}
GGUF_REPO, BASE_REPO = "acme/Qwen3.5-2B-GGUF", "acme/Qwen3.5-2B"
DEST = "models/Qwen3.5-2B-Q8_0.gguf"


def config(tmp_path: Path, **gguf_fields) -> Path:
    entry = {"repo": GGUF_REPO, "file": "Qwen3.5-2B-Q8_0.gguf", **gguf_fields}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"downloads": {"lock": "models.lock.yaml", "gguf": {DEST: entry},
                                                  "bases": {BASE_REPO: {}}}}))
    return path


def metrobench(tmp_path: Path, hub: FakeHub | None, *args: str, offline: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_HUB_OFFLINE", None)
    env["HF_ENDPOINT"] = hub.url if hub else "http://127.0.0.1:9"  # port 9: nothing listens
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "metrobench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


#: A download's notice of another try within its call (metrobench/hub/fetch.py), not an error.
NOTICE = re.compile(r"; resuming from byte \d+ \(try \d+ of \d+\)$|: restarting the file from byte 0$")


def one_error(done: subprocess.CompletedProcess) -> str:
    """The run failed with exactly one `metrobench: error:` line and no traceback; that line.

    Download progress bars (huggingface_hub's, on stderr) and a download's notices of its tries within
    the call ("...; resuming from byte N (try 2 of 4)", "...: restarting the file from byte 0") may come
    before it: a user wants them."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip() and "%|" not in line
             and not NOTICE.search(line)]
    assert len(lines) == 1 and lines[0].startswith("metrobench: error: "), done.stderr
    return lines[0]


@pytest.fixture
def hub():
    with FakeHub({GGUF_REPO: {"Qwen3.5-2B-Q8_0.gguf": GGUF}, BASE_REPO: BASE}, COMMIT,
                 branches={"v2": NEWER}) as server:
        yield server


def test_lock_resolves_from_metadata_then_fetch_downloads_and_verifies(tmp_path, hub):
    cfg = config(tmp_path)
    done = metrobench(tmp_path, hub, "lock", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    assert not any(r.startswith(("CDN", "GET /acme")) for r in hub.requests)  # metadata only, nothing downloaded
    lock = yaml.safe_load((tmp_path / "models.lock.yaml").read_text())
    assert lock["gguf"][DEST] == {"source": "hub", "repo": GGUF_REPO, "file": "Qwen3.5-2B-Q8_0.gguf",
                                  "revision": "main", "commit": COMMIT, "size": len(GGUF),
                                  "sha256": hashlib.sha256(GGUF).hexdigest()}
    base = lock["bases"][BASE_REPO]
    assert base["commit"] == COMMIT and sorted(base["files"]) == [
        "config.json", "model-00001-of-00001.safetensors", "tokenizer.json"]  # no vision tower, no MTP
    assert set(base["files"]["model-00001-of-00001.safetensors"]) == {"size", "sha256"}
    assert set(base["files"]["config.json"]) == {"size", "git_sha1"}

    fetched = metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST)
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / DEST).read_bytes() == GGUF
    # the part file renamed into place; the empty lock sidecar stays, as a transcript's does
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".Qwen3.5-2B-Q8_0.gguf.lock",
                                                                      "Qwen3.5-2B-Q8_0.gguf"]
    assert f"CDN GET /{GGUF_REPO}/Qwen3.5-2B-Q8_0.gguf" in hub.requests

    stamp = tmp_path / "stamp.json"
    fetched = metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO,
                         "--stamp", str(stamp))
    assert fetched.returncode == 0, fetched.stderr
    folder = Path(json.loads(stamp.read_text())["folder"])
    assert folder == tmp_path / "hf" / "hub" / "models--acme--Qwen3.5-2B" / "snapshots" / COMMIT
    assert sorted(p.name for p in folder.iterdir()) == sorted(base["files"])

    # train/merge find the snapshot offline at the locked commit
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    code = f"from metrobench.training.base import base_folder; print(base_folder('{BASE_REPO}', '{COMMIT}'))"
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(folder), found.stderr


def test_a_locked_entry_stays_until_updated_and_a_changed_config_is_a_mismatch(tmp_path, hub):
    cfg = config(tmp_path)
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    config(tmp_path, revision="v2")   # the config now asks for another branch
    check = metrobench(tmp_path, hub, "lock", "--config", str(cfg), "--check")
    assert check.returncode == 1
    assert check.stdout.strip() == (
        f"models.lock.yaml: downloads.gguf[{DEST}]: the config asks for {GGUF_REPO}/Qwen3.5-2B-Q8_0.gguf at v2, "
        f"the lock holds {GGUF_REPO}/Qwen3.5-2B-Q8_0.gguf at main; run `metrobench lock --update {DEST}`")
    # `lock` re-resolves only the entry that changed (a branch moving on the hub does not move the lock)
    hub.branches["main"] = NEWER
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    lock = yaml.safe_load((tmp_path / "models.lock.yaml").read_text())
    assert lock["gguf"][DEST]["commit"] == NEWER and lock["bases"][BASE_REPO]["commit"] == COMMIT
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg), "--update", BASE_REPO).returncode == 0
    assert yaml.safe_load((tmp_path / "models.lock.yaml").read_text())["bases"][BASE_REPO]["commit"] == NEWER
    assert "not an entry" in one_error(metrobench(tmp_path, hub, "lock", "--config", str(cfg), "--update", "x/y"))


def test_adopting_a_file_placed_by_hand(tmp_path, hub):
    cfg = config(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / DEST).write_bytes(b"my own quantisation")
    done = metrobench(tmp_path, hub, "lock", "--config", str(cfg), "--adopt", DEST)
    assert done.returncode == 0, done.stderr
    entry = yaml.safe_load((tmp_path / "models.lock.yaml").read_text())["gguf"][DEST]
    assert entry == {"source": "local", "size": 19, "sha256": hashlib.sha256(b"my own quantisation").hexdigest()}
    assert not any("Qwen3.5-2B-Q8_0.gguf" in r for r in hub.requests)  # never resolved on the hub
    ok = metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST)
    assert ok.returncode == 0, ok.stderr            # verified in place, no network needed
    (tmp_path / DEST).write_bytes(b"my own quantisatioN")
    assert "SHA-256" in one_error(metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml",
                                             "--gguf", DEST))
    (tmp_path / DEST).unlink()
    assert "adopted in models.lock.yaml as a local file, and missing" in one_error(
        metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))


@pytest.mark.parametrize("fault", ["corrupt", "cut"])
def test_a_bad_download_is_never_left_where_a_job_would_trust_it(tmp_path, hub, fault):
    cfg = config(tmp_path)
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    getattr(hub, fault).add("Qwen3.5-2B-Q8_0.gguf")
    line = one_error(metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))
    assert line.startswith(f"metrobench: error: {DEST} ")
    assert not (tmp_path / DEST).exists()
    assert not any((tmp_path / "models").glob("*.gguf"))
    getattr(hub, fault).clear()                      # the next run downloads afresh and succeeds
    done = metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / DEST).read_bytes() == GGUF


def test_a_corrupt_base_file_is_removed_from_the_cache_blob_and_all(tmp_path, hub):
    cfg = config(tmp_path)
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    hub.corrupt.add("model-00001-of-00001.safetensors")
    args = ("fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO)
    line = one_error(metrobench(tmp_path, hub, *args))
    assert "model-00001-of-00001.safetensors has SHA-256" in line and "removed from the cache" in line
    hub.corrupt.clear()
    done = metrobench(tmp_path, hub, *args)
    assert done.returncode == 0, done.stderr


def test_hub_failures_and_hand_edits_are_one_line_naming_the_entry(tmp_path, hub):
    cfg = config(tmp_path, repo="acme/nothing-here")
    assert "downloads.gguf[models/Qwen3.5-2B-Q8_0.gguf] (acme/nothing-here/Qwen3.5-2B-Q8_0.gguf at main): " \
           "no such repository" in one_error(metrobench(tmp_path, hub, "lock", "--config", str(cfg)))
    config(tmp_path, file="Qwen3.5-2B-Q4_0.gguf")
    assert "no such file" in one_error(metrobench(tmp_path, hub, "lock", "--config", str(cfg)))
    config(tmp_path, revision="no-such-branch")
    assert "no such revision" in one_error(metrobench(tmp_path, hub, "lock", "--config", str(cfg)))
    hub.gated.add(GGUF_REPO)
    config(tmp_path)
    assert "gated" in one_error(metrobench(tmp_path, hub, "lock", "--config", str(cfg)))
    assert "cannot reach the hub" in one_error(metrobench(tmp_path, None, "lock", "--config", str(cfg)))

    hub.gated.clear()
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    lock_file = tmp_path / "models.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["gguf"][DEST]["sha256"] = "not-a-digest"
    lock_file.write_text(yaml.safe_dump(lock))
    line = one_error(metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))
    assert f"models.lock.yaml: entry gguf.{DEST}.sha256:" in line
    lock["gguf"][DEST]["sha256"] = "0" * 64           # well-formed, wrong: the download is not kept
    lock_file.write_text(yaml.safe_dump(lock))
    assert "the lock says 0000" in one_error(
        metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))
    assert not (tmp_path / DEST).exists()
    lock["gguf"][DEST].update(sha256=hashlib.sha256(GGUF).hexdigest(), commit="f" * 40)   # unknown commit
    lock_file.write_text(yaml.safe_dump(lock))
    assert "no such revision" in one_error(
        metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))


def test_unlocked_entries_stop_at_once_naming_the_command(tmp_path):
    line = one_error(metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST))
    assert line == (f"metrobench: error: {DEST}: not in models.lock.yaml yet: run `metrobench lock` (resolves the "
                    f"config's downloads on the hub; no download) and commit the lock, or place the file there "
                    f"and run `metrobench lock --adopt {DEST}`")
    assert "not in models.lock.yaml yet" in one_error(
        metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO))


def test_offline_with_a_lock_needs_no_hub(tmp_path, hub):
    cfg = config(tmp_path)
    assert metrobench(tmp_path, hub, "lock", "--config", str(cfg)).returncode == 0
    assert metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO).returncode == 0
    # no hub at all: the check, and a base already in the cache, work from the lock alone
    assert metrobench(tmp_path, None, "lock", "--config", str(cfg), "--check", offline=True).returncode == 0
    again = metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO, offline=True)
    assert again.returncode == 0, again.stderr
    # a GGUF not downloaded yet is the one thing that needs the network
    assert "HF_HUB_OFFLINE" in one_error(
        metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST, offline=True))

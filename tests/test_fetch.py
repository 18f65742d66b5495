"""Fetching the benchmark at a pinned commit, with a real git repository as the remote."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.data.root import fetch
from metrobench.errors import DataError, MetrobenchError


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def remote(tmp_path_factory, root) -> tuple[Path, str]:
    """A git repository holding a copy of the benchmark files, and its commit."""
    repo = tmp_path_factory.mktemp("remote")
    for sub in ("cases", "data/systems", "data/splits"):
        shutil.copytree(root / sub, repo / sub)
    _git("init", "-q", cwd=repo)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data", cwd=repo)
    return repo, _git("rev-parse", "HEAD", cwd=repo).strip()


def test_fetch_checks_out_commit_and_verifies(tmp_path, remote):
    repo, commit = remote
    dest = fetch(tmp_path / "bench", repository=f"file://{repo}", commit=commit)
    assert _git("rev-parse", "HEAD", cwd=dest).strip() == commit
    assert (dest / "cases" / "beijing_cases.json").is_file()
    # idempotent: a second fetch reuses the checkout
    assert fetch(dest, repository=f"file://{repo}", commit=commit) == dest


def test_fetch_refuses_other_commit_and_nonempty_dest(tmp_path, remote):
    repo, commit = remote
    dest = fetch(tmp_path / "bench", repository=f"file://{repo}", commit=commit)
    with pytest.raises(MetrobenchError, match="not the pinned commit"):
        fetch(dest, repository=f"file://{repo}", commit="0" * 40)
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("x")
    with pytest.raises(MetrobenchError, match="not empty"):
        fetch(other, repository=f"file://{repo}", commit=commit)


def test_fetch_of_tampered_repository_fails_verification(tmp_path, remote):
    repo, _ = remote
    work = tmp_path / "tampered"
    shutil.copytree(repo, work)
    path = work / "cases" / "taipei_cases.json"
    path.chmod(0o644)
    path.write_text(path.read_text().replace("TRTC-A-001", "TRTC-A-999", 1))
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "tamper", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work).strip()
    with pytest.raises(DataError, match="cases/taipei_cases.json"):
        fetch(tmp_path / "bench", repository=f"file://{work}", commit=commit)


def test_fetch_unreachable_repository_is_a_clear_error(tmp_path, capsys):
    code = main(["fetch-data", "--dest", str(tmp_path / "b"), "--repository",
                 f"file://{tmp_path}/missing", "--commit", "1" * 40])
    assert code == 2
    assert "git fetch" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # a failed fetch leaves nothing behind

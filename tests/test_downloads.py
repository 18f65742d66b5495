"""Downloads under faults (issue 41, class 3): resumption, two fetches at once, adopted keys, hub errors.

Against the hub stand-in (metrobench/standins/hf_hub.py), which speaks the hub's
wire format: a resolve that redirects to a CDN honouring ``Range``, and the
faults named in each test. Every wait is tied to an event (the stand-in's
``stalled``, a line the second fetch prints), never to a clock.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from test_models_lock import BASE, BASE_REPO, COMMIT, DEST, GGUF, GGUF_REPO, config, metrobench, one_error

from metrobench.errors import MetrobenchError
from metrobench.study import load_study
from metrobench.standins.hf_hub import FakeHub

NAME = "Qwen3.5-2B-Q8_0.gguf"
CDN_PATH = f"/{GGUF_REPO}/{NAME}"
PART = f"models/.{NAME}.{hashlib.sha256(GGUF).hexdigest()[:12]}.part"
HALF = len(GGUF) // 2
#: What the tests put in HF_TOKEN: it must reach the hub, and never a message.
TOKEN = "hf_SECRETtokenNEVERshown0123456789"
FETCH = ("fetch-model", "--lock", "models.lock.yaml", "--gguf", DEST)
#: Seconds a test waits for an event that must come at once (a bound for a broken build, not a timing).
EVENT_LIMIT_S = 60


@pytest.fixture
def hub():
    with FakeHub({GGUF_REPO: {NAME: GGUF}, BASE_REPO: BASE}, COMMIT) as server:
        yield server


def locked(tmp_path: Path, hub: FakeHub) -> None:
    done = metrobench(tmp_path, hub, "lock", "--config", str(config(tmp_path)))
    assert done.returncode == 0, done.stderr


def env_for(tmp_path: Path, hub: FakeHub) -> dict[str, str]:
    # a stalled first fetch must outwait the second one's start however slow the machine: no read timeout
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DOWNLOAD_TIMEOUT="600")
    env.pop("HF_HUB_OFFLINE", None)
    return env


def start_fetch(tmp_path: Path, hub: FakeHub) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "metrobench", *FETCH], cwd=tmp_path, env=env_for(tmp_path, hub),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fetch(tmp_path: Path, hub: FakeHub) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metrobench", *FETCH], cwd=tmp_path, env=env_for(tmp_path, hub),
                          capture_output=True, text=True, timeout=120)


# -- 1. a download resumes -------------------------------------------------------------------

def test_a_download_cut_on_every_try_keeps_its_part_and_the_rerun_asks_only_for_the_rest(tmp_path, hub):
    locked(tmp_path, hub)
    hub.cut.add(NAME)                          # every answer: Content-Length says all of it, the body stops halfway
    line = one_error(fetch(tmp_path, hub))
    kept = (tmp_path / PART).read_bytes()
    # four tries within the call, each resuming from the bytes on disk, then the one line
    assert [r for _, r in hub.ranges] == [None, f"bytes={HALF}-", f"bytes={HALF + (len(GGUF) - HALF) // 2}-",
                                          hub.ranges[3][1]] and len(hub.ranges) == 4
    assert line == (f"metrobench: error: {DEST} ({GGUF_REPO}/{NAME} at {COMMIT}): the hub's answer was cut short "
                    f"(RemoteProtocolError) after {len(kept)} of {len(GGUF)} bytes (4 tries in this call); the part "
                    f"is kept in {PART}: rerun to resume")
    assert HALF < len(kept) < len(GGUF) and kept == GGUF[:len(kept)] and not (tmp_path / DEST).exists()
    hub.cut.clear()
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    assert hub.ranges[4:] == [(CDN_PATH, f"bytes={len(kept)}-")]
    assert (tmp_path / DEST).read_bytes() == GGUF and not (tmp_path / PART).exists()


def test_a_killed_download_resumes_from_what_it_wrote(tmp_path, hub):
    locked(tmp_path, hub)
    hub.stall.add(NAME)
    first = start_fetch(tmp_path, hub)
    assert hub.stalled.wait(EVENT_LIMIT_S)     # half the body sent, the rest held back
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=EVENT_LIMIT_S)
    part = tmp_path / PART
    assert part.exists() and not (tmp_path / DEST).exists()   # opened before the request went out
    kept = part.read_bytes()
    assert kept == GGUF[:len(kept)] and len(kept) <= HALF
    hub.stall.clear()
    hub.release.set()
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    # the second request asks for exactly the bytes the killed one did not write
    assert hub.ranges[-1] == (CDN_PATH, f"bytes={len(kept)}-" if kept else None)
    assert (tmp_path / DEST).read_bytes() == GGUF and not part.exists()


def test_a_part_that_does_not_verify_is_deleted_and_a_hub_ignoring_the_range_starts_over(tmp_path, hub):
    locked(tmp_path, hub)
    (tmp_path / "models").mkdir()
    (tmp_path / PART).write_bytes(b"X" * 100)  # not a prefix of the file: the resumed whole does not verify
    line = one_error(fetch(tmp_path, hub))
    assert "the download has SHA-256" in line and "it was deleted" in line
    assert not (tmp_path / PART).exists() and not (tmp_path / DEST).exists()
    assert hub.ranges == [(CDN_PATH, "bytes=100-")]
    done = fetch(tmp_path, hub)                # from byte 0 now
    assert done.returncode == 0 and (tmp_path / DEST).read_bytes() == GGUF


def test_a_part_of_another_version_of_the_file_is_never_resumed_into_this_one(tmp_path, hub):
    locked(tmp_path, hub)
    (tmp_path / "models").mkdir()
    older = tmp_path / f"models/.{NAME}.{'0' * 12}.part"   # left by a fetch under an older lock entry
    older.write_bytes(GGUF[:100])
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    assert hub.ranges == [(CDN_PATH, None)] and not older.exists()
    assert (tmp_path / DEST).read_bytes() == GGUF


# -- 2. two fetches of one file at once --------------------------------------------------------

def test_a_second_fetch_of_the_same_file_waits_then_finds_it_done(tmp_path, hub):
    locked(tmp_path, hub)
    hub.stall.add(NAME)
    first = start_fetch(tmp_path, hub)
    assert hub.stalled.wait(EVENT_LIMIT_S)     # the first holds the lock, half-way through the body
    second = start_fetch(tmp_path, hub)
    said, waiting = [], threading.Event()

    def read_first_line() -> None:
        said.append(second.stderr.readline())
        waiting.set()

    threading.Thread(target=read_first_line, daemon=True).start()
    assert waiting.wait(EVENT_LIMIT_S), "the second fetch never said it waits"
    assert said == [f"{DEST}: another fetch of this file is running; waiting for it to finish\n"]
    hub.release.set()
    out, err = first.communicate(timeout=EVENT_LIMIT_S)
    assert first.returncode == 0, err
    out, err = second.communicate(timeout=EVENT_LIMIT_S)
    assert second.returncode == 0, err
    assert out.startswith(f"{DEST}: {len(GGUF)} bytes")
    assert hub.ranges == [(CDN_PATH, None)]    # one download: the second verified the first's file
    assert (tmp_path / DEST).read_bytes() == GGUF
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [f".{NAME}.lock", NAME]


def test_a_foreign_file_at_the_destination_is_never_replaced(tmp_path, hub):
    locked(tmp_path, hub)
    (tmp_path / "models").mkdir()
    (tmp_path / DEST).write_bytes(b"someone's own file")
    line = one_error(fetch(tmp_path, hub))
    assert line.startswith(f"metrobench: error: {DEST}: a file is already there, and it is not the locked one "
                           f"(size 18 bytes, the lock says {len(GGUF)})")
    assert (tmp_path / DEST).read_bytes() == b"someone's own file" and hub.ranges == []


# -- 3. adopted files: one key per file ---------------------------------------------------------

def test_an_adopted_file_is_one_entry_however_it_is_spelt_and_the_hub_never_overwrites_it(tmp_path, hub):
    cfg = config(tmp_path)                     # the config names models/Qwen3.5-2B-Q8_0.gguf for the hub
    (tmp_path / "models").mkdir()
    (tmp_path / DEST).write_bytes(b"my own quantisation")
    done = metrobench(tmp_path, hub, "lock", "--config", str(cfg), "--adopt", f"./{DEST}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{DEST}: adopted as a local file (19 bytes")
    lock = yaml.safe_load((tmp_path / "models.lock.yaml").read_text())
    assert lock["gguf"] == {DEST: {"source": "local", "size": 19,
                                   "sha256": hashlib.sha256(b"my own quantisation").hexdigest()}}
    assert not any(NAME in r for r in hub.requests)           # never resolved, never downloaded
    for spelling in (f"./{DEST}", DEST, f"models//{NAME}"):
        ok = metrobench(tmp_path, None, "fetch-model", "--lock", "models.lock.yaml", "--gguf", spelling)
        assert ok.returncode == 0, ok.stderr
    assert (tmp_path / DEST).read_bytes() == b"my own quantisation"


def test_a_lock_with_two_spellings_of_one_file_keeps_the_adopted_one(tmp_path, hub):
    locked(tmp_path, hub)                      # models/...: from the hub
    lock_file = tmp_path / "models.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["gguf"][f"./{DEST}"] = {"source": "local", "size": 19,
                                 "sha256": hashlib.sha256(b"my own quantisation").hexdigest()}
    lock_file.write_text(yaml.safe_dump(lock))  # what `lock --adopt ./models/...` wrote before keys were normalised
    (tmp_path / "models").mkdir()
    (tmp_path / DEST).write_bytes(b"my own quantisation")
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / DEST).read_bytes() == b"my own quantisation" and hub.ranges == []


@pytest.mark.parametrize(("key", "why"), [
    (".", "names a folder, not a file"),
    ("models/", "names a folder, not a file"),
    ("/srv/models/x.gguf", "is absolute"),
    ("models/../../x.gguf", "climbs out of the project folder"),
    ("", "is empty"),
])
def test_a_download_key_that_is_not_a_file_path_is_refused_naming_it(tmp_path, key, why):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"downloads": {"gguf": {key: {"repo": GGUF_REPO, "file": NAME}}}}))
    with pytest.raises(MetrobenchError) as refused:
        load_study([path])
    message = str(refused.value)
    assert message.startswith(f"{path}: field downloads.gguf: ") and f"key {key!r} {why}" in message
    assert "\n" not in message


def test_two_spellings_of_one_download_are_refused_and_one_is_normalised(tmp_path):
    path = tmp_path / "study.yaml"
    entry = {"repo": GGUF_REPO, "file": NAME}
    path.write_text(yaml.safe_dump({"downloads": {"gguf": {f"./{DEST}": entry, DEST: entry}}}))
    with pytest.raises(MetrobenchError, match=rf"keys '\./{DEST}' and '{DEST}' name one file"):
        load_study([path])
    path.write_text(yaml.safe_dump({"downloads": {"gguf": {f"./{DEST}": entry}}}))
    assert list(load_study([path]).downloads.gguf) == [DEST]


# -- 4. every hub failure says what happened ------------------------------------------------------

@pytest.mark.parametrize(("fault", "says"), [
    (401, "the hub refused the token (401): HF_TOKEN is missing, expired or wrong for this repository"),
    (403, "the hub refused access (403): the token may not read this repository"),
    (500, "the hub failed with a server error (500): rerun later"),
    ("cut", "the hub's answer was cut short (RemoteProtocolError) after "),
    ("disk", f"cannot write {PART}: no space left on the disk (ENOSPC); the part is kept"),
])
def test_each_hub_failure_is_one_line_saying_what_happened_and_never_the_token(tmp_path, hub, fault, says):
    locked(tmp_path, hub)
    if fault == "cut":
        hub.cut.add(NAME)
    elif fault == "disk":                      # a real ENOSPC from the kernel: the part is /dev/full
        (tmp_path / "models").mkdir()
        (tmp_path / PART).symlink_to("/dev/full")
    else:
        hub.refuse[NAME] = fault
    done = fetch(tmp_path, hub)
    line = one_error(done)
    assert line.startswith(f"metrobench: error: {DEST} ({GGUF_REPO}/{NAME} at {COMMIT}): {says}"), line
    assert "cannot reach the hub" not in line and "no network" not in line
    assert TOKEN not in done.stderr + done.stdout and "SECRET" not in done.stderr
    assert f"GET /{GGUF_REPO}/resolve/{COMMIT}/{NAME}" in hub.authorized           # the token went to the hub,
    assert not any(r.startswith("CDN") for r in hub.authorized)                    # never to the CDN
    assert not (tmp_path / DEST).exists()


def test_a_server_error_on_a_base_is_not_a_network_problem(tmp_path, hub):
    locked(tmp_path, hub)
    hub.refuse["model-00001-of-00001.safetensors"] = 500
    line = one_error(metrobench(tmp_path, hub, "fetch-model", "--lock", "models.lock.yaml", "--base", BASE_REPO))
    assert line.startswith(f"metrobench: error: base {BASE_REPO} at {COMMIT}: the hub failed with a server "
                           f"error (500)"), line


@pytest.mark.parametrize("status", [403, 500])
def test_a_refused_metadata_call_is_not_a_network_problem_either(tmp_path, hub, status):
    hub.refuse[GGUF_REPO] = status
    line = one_error(metrobench(tmp_path, hub, "lock", "--config", str(config(tmp_path))))
    assert line.startswith(f"metrobench: error: downloads.gguf[{DEST}] ({GGUF_REPO}/{NAME} at main): the hub "
                           f"{'refused access (403)' if status == 403 else 'failed with a server error (500)'}"), line

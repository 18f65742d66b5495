"""Issue 51's fault drills on files: GGUF headers (item 11) and downloads (item 14).

GGUF files here are written byte by byte (``struct.pack``), so a test can state exactly which
field is wrong, and needs no optional package. Every malformed header must end as one line
naming the file and the field: in the reader, in the fit check (the workflow's start), in
``doctor`` and in the run job's check; never a traceback, a hang, or an estimate that "fits".
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import yaml

from metrobench import doctor
from metrobench.errors import MetrobenchError
from metrobench.footprint.architectures import arch_of
from metrobench.footprint.fit import check_study, study_needs
from metrobench.footprint.gguf_header import read_gguf_header
from metrobench.study import load_study

U32, I32, STR, ARR, U64 = 4, 5, 8, 9, 10
F32, Q4_K = 0, 12
GGML_BLOCKS = {F32: (1, 4), Q4_K: (256, 144)}      # ggml's (elements, bytes) a block


def _s(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def kv(key: str, kind: int, value: object) -> bytes:
    """One metadata entry: a u32/i32/u64 number, a string, or raw bytes after the type (``bytes``)."""
    if isinstance(value, bytes):
        payload = value
    elif kind == STR:
        payload = _s(str(value))
    else:
        payload = struct.pack({U32: "<I", I32: "<i", U64: "<Q"}[kind], value)
    return _s(key) + struct.pack("<I", kind) + payload


def llama_kvs(blocks: object = 2, kind: int = U32) -> list[bytes]:
    """A small llama's metadata (block count as given: the field most drills corrupt)."""
    return [kv("general.architecture", STR, "llama"), kv("llama.block_count", kind, blocks),
            kv("llama.embedding_length", U32, 64), kv("llama.attention.head_count", U32, 4),
            kv("llama.attention.head_count_kv", U32, 2), kv("llama.vocab_size", U32, 32)]


def write_gguf(path: Path, kvs: list[bytes], tensors: list[tuple[str, list[int], int]] | None = None,
               alignment: int = 32, data: bool = True) -> Path:
    """A GGUF v3 of these entries and tensors (name, dims, ggml type), their data zeros (or left out)."""
    tensors = [("token_embd.weight", [64, 32], F32)] if tensors is None else tensors
    infos, offset, sizes = b"", 0, []
    for name, dims, kind in tensors:
        block, width = GGML_BLOCKS[kind]
        count = 1
        for dim in dims:
            count *= dim
        infos += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", kind, offset)
        size = count // block * width
        sizes.append(size)
        offset += -(-size // alignment) * alignment
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * (-len(head) % alignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head + (b"\0" * offset if data else b""))
    return path


def one_line(exc: pytest.ExceptionInfo, path: Path, *fragments: str) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    for fragment in fragments:
        assert fragment in text, text
    return text


# --- item 11: the reader ------------------------------------------------------------------------


def test_a_well_formed_hand_written_gguf_reads():
    """The helper's own file reads: the drills below differ from it in one field each."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = write_gguf(Path(tmp) / "m.gguf", llama_kvs())
        arch = arch_of(path)
        assert (arch.name, arch.layers, arch.kv_heads, arch.hidden, arch.vocab) == ("llama", 2, 2, 64, 32)
        assert read_gguf_header(path).tensor_bytes == {"token_embd.weight": 64 * 32 * 4}


HUGE = 2**62


@pytest.mark.parametrize("name, kvs, fragments", [
    ("negative-blocks", llama_kvs(-3, I32), ["llama.block_count", "-3 is outside 1-4,096"]),
    ("zero-blocks", llama_kvs(0), ["llama.block_count", "0 is outside"]),
    ("2**40-blocks", llama_kvs(2**40, U64), ["llama.block_count", "1,099,511,627,776 is outside"]),
    ("string-blocks", llama_kvs("32", STR), ["llama.block_count", "'32' is a str, not a whole number"]),
    ("no-blocks", llama_kvs()[:1] + llama_kvs()[2:], ["llama.block_count: missing"]),
    ("no-architecture", llama_kvs()[1:], ["general.architecture: missing"]),
    ("alignment-0", [*llama_kvs(), kv("general.alignment", U32, 0)], ["general.alignment", "0 (a power of two"]),
    ("alignment-string", [*llama_kvs(), kv("general.alignment", STR, "32")], ["general.alignment"]),
    ("huge-string", [*llama_kvs(), _s("general.name") + struct.pack("<IQ", STR, HUGE)],
     ["general.name", "past the end of the file"]),
    ("huge-array", [*llama_kvs(), _s("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, 6, 2**40)],
     ["tokenizer.ggml.scores", "count 1,099,511,627,776 is above"]),
    ("huge-string-array", [*llama_kvs(), _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 2**20)],
     ["tokenizer.ggml.tokens", "past the end of the file"]),
    ("bad-type", [*llama_kvs(), _s("general.x") + struct.pack("<I", 77)], ["general.x", "value type 77"]),
    ("nested-array", [*llama_kvs(), _s("general.x") + struct.pack("<IIQ", ARR, ARR, 1)],
     ["general.x", "an array of value type 9"]),
    ("duplicate-key", [*llama_kvs(), kv("llama.embedding_length", U32, 64)],
     ["llama.embedding_length", "the key appears twice"]),
    ("width-array", [*llama_kvs()[:2], kv("llama.embedding_length", ARR, struct.pack("<IQII", U32, 2, 64, 64)),
                     *llama_kvs()[3:]], ["llama.embedding_length", "an array where one number belongs"]),
])
def test_a_malformed_header_is_one_line_naming_the_file_and_field(tmp_path, name, kvs, fragments):
    path = write_gguf(tmp_path / f"{name}.gguf", kvs)
    with pytest.raises(MetrobenchError) as exc:
        arch_of(path)
    one_line(exc, path, *fragments)


@pytest.mark.parametrize("head, fragments", [
    (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), ["tensor count", "is above"]),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), ["metadata count", "is above"]),
    (b"GGUF" + struct.pack("<IQQ", 3, 1000, 0), ["tensor count", "past the end of the file"]),
    (b"GGUF" + struct.pack("<I", 7) + bytes(16), ["version", "7"]),
    (b"GGUF\x03\x00", ["version", "past the end of the file"]),
    (b"", ["not a GGUF file: it starts with ''"]),
], ids=["tensors-2**40", "entries-2**40", "tensors-past-end", "version-7", "cut-in-version", "empty"])
def test_counts_and_lengths_are_held_to_the_file(tmp_path, head, fragments):
    path = tmp_path / "m.gguf"
    path.write_bytes(head)
    with pytest.raises(MetrobenchError) as exc:
        read_gguf_header(path)
    one_line(exc, path, *fragments)


def test_a_tensors_dims_type_and_offset_are_checked(tmp_path):
    good = llama_kvs()
    for dims, kind, fragment in [([64, 32, 1, 1, 1], F32, "5 dimensions (1-4)"),
                                 ([100, 2], Q4_K, "100 elements a row is not a multiple of its type's block of 256"),
                                 ([2**40, 2**40], F32, "too many elements")]:
        path = write_gguf(tmp_path / "t.gguf", good, [("w", dims, kind)], data=False)
        with pytest.raises(MetrobenchError) as exc:
            read_gguf_header(path)
        one_line(exc, path, "tensor w", fragment)


def test_a_truncated_27b_file_is_refused_not_estimated_from_its_size(tmp_path):
    """Round 4: a 27B download cut short read as a 1.9 GiB model that "fits". Its header states a
    tensor of 5.6 GB; the file holds a few KB: the reader names the tensor and the sizes."""
    path = tmp_path / "models" / "Qwen3.5-27B-Q4_K_M.gguf"
    kvs = [kv("general.architecture", STR, "qwen35"), kv("qwen35.block_count", U32, 64),
           kv("qwen35.embedding_length", U32, 5120), kv("qwen35.attention.head_count_kv", U32, 4)]
    write_gguf(path, kvs, [("blk.0.ffn_down.weight", [5120, 1_000_000], Q4_K)], data=False)
    with pytest.raises(MetrobenchError) as exc:
        read_gguf_header(path)
    one_line(exc, path, "tensor blk.0.ffn_down.weight", "but the file has", "truncated")


def test_an_html_page_saved_as_the_gguf_says_so(tmp_path):
    path = tmp_path / "Llama-3.1-8B-Instruct-Q8_0.gguf"
    path.write_text("<!DOCTYPE html><html><body>Access denied</body></html>")
    with pytest.raises(MetrobenchError) as exc:
        arch_of(path)
    one_line(exc, path, "not a GGUF file", "'<!DO'", "HTML page")


# --- item 11: the row's error in the fit, doctor and the run job -----------------------------------


CARD = {"name": "Test card", "memory_gib": 80}


def _study(tmp_path: Path, gguf: Path, enforce: bool = True) -> Path:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "systems": ["cta"], "gpu": {**CARD, "enforce": enforce},
        "models": {"m": {"provider": "llama_cpp", "serving": {
            "gguf": str(gguf), "n_ctx": 8192, "parallel": 1, "n_gpu_layers": 999}}}}))
    return config


@pytest.mark.parametrize("corrupt", ["truncated", "html", "negative-blocks"])
def test_a_broken_served_file_is_the_rows_error_at_the_start_and_in_doctor(tmp_path, corrupt):
    """The workflow's start (check_study), doctor's fit and model-files checks: the row fails, naming the
    model, the file and the field; never dropped from the fit, never "ready"."""
    gguf = tmp_path / "models" / "Llama-3.1-8B-Instruct-Q8_0.gguf"
    config = _study(tmp_path, gguf)
    write_gguf(gguf, llama_kvs())
    study = load_study([config])
    assert check_study(study, str(config)) is None                  # the good file fits
    assert [n.name for n in study_needs(study) if n.job == "serving"] == ["m"]
    if corrupt == "truncated":
        gguf.write_bytes(gguf.read_bytes()[:-100])
    elif corrupt == "html":
        gguf.write_text("<html><head><title>404</title></head></html>")
    else:
        write_gguf(gguf, llama_kvs(-3, I32))
    line = check_study(study, str(config))
    assert line is not None and "\n" not in line
    assert line.startswith(f"{config}: serving m: {gguf}: "), line
    [fit, *_] = doctor.check_gpu_fit(study, device=lambda: None)
    assert (fit.status, fit.name) == ("FAIL", "gpu memory") and str(gguf) in fit.detail
    [files] = doctor.check_models(doctor.read_needs(study), tmp_path, study)
    assert (files.status, files.name) == ("FAIL", "model files") and files.detail.startswith(f"m: {gguf}: ")


def test_the_run_jobs_check_refuses_a_broken_file_before_its_server(tmp_path):
    from metrobench.agents.runner.config import study_model_config
    from metrobench.footprint.fit import run_refusal

    gguf = write_gguf(tmp_path / "Llama-3.1-8B-Instruct-Q8_0.gguf", llama_kvs(2**40, U64))
    study = load_study([_study(tmp_path, gguf)])
    cfg = study_model_config("m", study.models["m"])
    with pytest.raises(MetrobenchError) as exc:
        run_refusal(cfg, gguf, study.gpu)
    one_line(exc, gguf, "llama.block_count")


# --- item 14: downloads retry within the call, and a proxy's 206 from byte 0 restarts the file once --------


@pytest.fixture
def hub():
    from test_downloads import NAME
    from test_models_lock import BASE, BASE_REPO, COMMIT, GGUF, GGUF_REPO

    from metrobench.standins.hf_hub import FakeHub

    with FakeHub({GGUF_REPO: {NAME: GGUF}, BASE_REPO: BASE}, COMMIT) as server:
        yield server


def test_a_download_cut_once_is_resumed_within_the_call(tmp_path, hub):
    """Round 3's regression: one network reset stopped the fetch job ("rerun to resume"). Now the call
    tries again from the bytes on disk, says so in one line, and ends with the verified file."""
    from test_downloads import CDN_PATH, DEST, NAME, PART, fetch, locked
    from test_models_lock import GGUF

    locked(tmp_path, hub)
    hub.cut_after[NAME] = [1000]                 # the first answer stops after 1,000 bytes; the next is whole
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    assert hub.ranges == [(CDN_PATH, None), (CDN_PATH, "bytes=1000-")]
    assert (tmp_path / DEST).read_bytes() == GGUF and not (tmp_path / PART).exists()
    assert "cut short (RemoteProtocolError) after 1000 of" in done.stderr and "resuming from byte 1000 (try 2 of 4)" \
        in done.stderr and "Traceback" not in done.stderr


def test_a_206_from_byte_0_restarts_the_file_once_instead_of_a_dead_end(tmp_path, hub):
    """A proxy that answers a resumed download's ``Range: bytes=N-`` with ``206`` from byte 0: every rerun
    used to stop the same way. Now the part is emptied and the file asked for whole, once."""
    from test_downloads import CDN_PATH, DEST, NAME, PART, fetch, locked
    from test_models_lock import GGUF

    locked(tmp_path, hub)
    (tmp_path / PART).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / PART).write_bytes(GGUF[:500])    # a part left by an earlier cut
    hub.from_zero[NAME] = 1
    done = fetch(tmp_path, hub)
    assert done.returncode == 0, done.stderr
    assert hub.ranges == [(CDN_PATH, "bytes=500-"), (CDN_PATH, None)]
    assert (tmp_path / DEST).read_bytes() == GGUF and not (tmp_path / PART).exists()
    assert f"bytes 0-{len(GGUF) - 1}/{len(GGUF)}': restarting the file from byte 0" in done.stderr


def test_a_proxy_ignoring_every_range_start_is_one_line_after_one_restart(tmp_path, hub):
    """Cut after the restart, and the resume misanswered again: one line naming the proxy, not a loop."""
    from test_downloads import DEST, NAME, PART, fetch, locked
    from test_models_lock import GGUF, one_error

    locked(tmp_path, hub)
    (tmp_path / PART).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / PART).write_bytes(GGUF[:500])
    hub.from_zero[NAME] = 10
    hub.cut_after[NAME] = [0, 700]               # the first (misanswered) and the restart both cut
    line = one_error(fetch(tmp_path, hub))
    assert "asked for the bytes from 700 on, the hub answered" in line and "again after a restart from byte 0" \
        in line and f"the part is kept in {PART}" in line, line
    assert len(hub.ranges) == 3 and not (tmp_path / DEST).exists()

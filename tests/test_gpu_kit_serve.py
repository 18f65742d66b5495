"""The serving half of the GPU kit (scripts/gpu-kit/serve.sh), checked on the CPU.

No GPU has run it yet. The fast tests hold its pure parts: the budget that skips a
step, speeds and memory carried from a few depths to the full one, the table writer,
the GGUF cut or grown to another depth, the llama.cpp tree the kit packs, and the
rehearsal's widths. The slow one runs ``serve.sh --cpu`` end to end (every size
written by the project's chain at tiny widths and served by the project's own
llama-server) and checks the table's rows and columns and that its figures are
positive and agree where llama.cpp's arithmetic makes them agree: never a speed.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metrobench.footprint import GIB
from metrobench.footprint.server_memory import Depth, parts_of, read_buffers, scaled_parts

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "scripts" / "gpu-kit"
MIB = 2**20


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    return _load("serve_table", KIT / "serve_table.py")


@pytest.fixture(scope="module")
def serve():
    return _load("serve", KIT / "serve.py")


# ---------------------------------------------------------------- the budget

def test_a_step_gets_its_cap_cut_to_what_is_left_and_none_below_the_minimum(table):
    assert table.step_limit(60, 500, 20) == 60
    assert table.step_limit(60, 45, 20) == 45
    assert table.step_limit(60, 20, 20) == 20
    assert table.step_limit(60, 19.9, 20) is None
    assert table.step_limit(60, -5, 20) is None


def test_a_step_the_budget_cannot_start_is_skipped_and_says_why(serve, monkeypatch):
    run = serve.Run.__new__(serve.Run)          # only the budget's parts
    run.mode, run.budget, run.t0 = "gpu", 540.0, 1_000.0
    monkeypatch.setattr(serve.time, "time", lambda: 1_000.0 + 530.0)
    step = serve.Step("serve-27b@4", "serve", 60, "27b", 4)
    assert run.limit(step) is None
    assert (step.status, step.done.is_set()) == ("skipped", True)
    assert "left" in step.why and "540" in step.why
    monkeypatch.setattr(serve.time, "time", lambda: 1_000.0 + 100.0)
    fresh = serve.Step("serve-27b@16", "serve", 60, "27b", 16)
    assert run.limit(fresh) == 60 and fresh.status == "pending"


# ---------------------------------------------------------------- speeds and memory at full depth

def test_a_line_through_two_depths_is_extrapolated_exactly(table):
    fixed, per_layer = 0.004, 0.0005                       # seconds a token: the head, then each block
    points = [(4, fixed + 4 * per_layer), (16, fixed + 16 * per_layer)]
    seconds, how = table.time_at(points, 64)
    assert seconds == pytest.approx(fixed + 64 * per_layer)
    assert "line through depths 4, 16" in how


def test_one_depth_is_scaled_in_proportion_and_said_to_be_a_bound(table):
    seconds, how = table.time_at([(16, 0.012)], 64)
    assert seconds == pytest.approx(0.048) and "bound" in how
    # a fit that says time falls with depth (noise) is not extrapolated either
    seconds, how = table.time_at([(4, 0.02), (16, 0.01)], 64)
    assert seconds == pytest.approx(0.04) and "bound" in how


def test_a_measurement_at_full_depth_is_taken_as_it_is(table):
    assert table.time_at([(4, 1.0), (24, 3.0)], 24) == (3.0, "measured at full depth")
    with pytest.raises(ValueError):
        table.time_at([], 24)


LOG = """\
0.01.764 I load_tensors:   CPU_Mapped model buffer size =   400.00 MiB
0.01.765 I load_tensors:        CUDA0 model buffer size =  2048.50 MiB
0.01.767 I llama_context:  CUDA_Host  output buffer size =     1.89 MiB
0.01.780 I llama_kv_cache:        CUDA0 KV buffer size =  1024.00 MiB
0.01.862 I llama_memory_recurrent:      CUDA0 RS buffer size =    12.50 MiB
0.01.881 I sched_reserve:      CUDA0 compute buffer size =   300.00 MiB
0.01.882 I sched_reserve:  CUDA_Host compute buffer size =    20.00 MiB
"""


def test_the_servers_buffers_are_read_from_its_log_and_split_by_device():
    buffers = read_buffers(LOG)
    assert [(b.kind, b.device) for b in buffers] == [("model", "CPU_Mapped"), ("model", "CUDA0"),
                                                    ("output", "CUDA_Host"), ("KV", "CUDA0"), ("RS", "CUDA0"),
                                                    ("compute", "CUDA0"), ("compute", "CUDA_Host")]
    device = parts_of(buffers)
    assert device["weights"] * GIB == 2048.5 * MIB and device["kv"] * GIB == 1024 * MIB
    assert device["recurrent"] * GIB == 12.5 * MIB and device["compute"] * GIB == 300 * MIB
    assert device["output"] == 0.0
    every = parts_of(buffers, device=False)                 # a server on the CPU: all of it
    assert every["weights"] * GIB == 2448.5 * MIB and every["compute"] * GIB == 320 * MIB
    assert read_buffers("no buffers here") == []


def test_memory_is_carried_to_full_depth_block_by_block():
    measured = {"weights": 3.0, "kv": 0.5, "recurrent": 0.03, "compute": 0.3, "output": 0.01}
    at = Depth(layers=16, kv_layers=4, block_bytes=2.0 * GIB)           # 1 GiB of head, norms and padding
    full = scaled_parts(measured, at, Depth(64, 16, 0.0))
    assert full == pytest.approx({"weights": 1.0 + 2.0 * 4, "kv": 0.5 * 4, "recurrent": 0.03 * 48 / 12,
                                  "compute": 0.3, "output": 0.01})
    exact = scaled_parts(measured, at, Depth(64, 16, 7.5 * GIB))        # the full file's own blocks
    assert exact["weights"] == pytest.approx(8.5)
    with pytest.raises(ValueError, match="not all on this device"):
        scaled_parts({**measured, "weights": 1.0}, at, Depth(64, 16, 0.0))


def _record(layers: int, kv_layers: int, fixed: float = 0.004, per_layer: float = 0.0005) -> dict:
    """A serve record of a model whose times are a line in the depth, and whose memory is per block."""
    token = fixed + per_layer * layers
    return {"model": "qwen3.5-27b", "quant": "Q4_K_M", "layers": layers, "kv_layers": kv_layers,
            "n_ctx": 196608, "parallel": 2, "block_bytes": layers * 0.25 * GIB,
            "server_gib": {"weights": 1.0 + layers * 0.25, "kv": kv_layers * 0.75,
                           "recurrent": 0.01 * (layers - kv_layers),
                           "compute": 0.4, "output": 0.002,
                           "total": 1.0 + layers * 0.25 + kv_layers * 0.75 + 0.01 * (layers - kv_layers) + 0.402},
            "device_gib": 2.0 + layers * 0.25 + kv_layers * 0.75,
            "cold": {"tokens": 12000, "ms": 1000 * 12000 * token / 40},
            "warm": {"processed": 2004, "cached": 11996, "ms": 1000 * 2004 * token / 40},
            "decode1": {"tokens": 128, "ms": 1000 * 128 * token},
            "decode2": {"tokens": [128, 128], "ms": [1000 * 128 * token * 1.2] * 2}}


def test_a_sizes_summary_is_its_line_at_full_depth(table):
    info = {"model": "qwen3.5-27b", "quant": "Q4_K_M", "full_layers": 64, "full_kv_layers": 16,
            "estimate_gib": {"total": 28.16}}
    summary = table.size_summary("27b", info, [_record(4, 1), _record(16, 4)])
    token = 0.004 + 0.0005 * 64
    assert summary["decode1_tps"] == pytest.approx(1 / token)
    assert summary["decode2_tps"] == pytest.approx(2 / (token * 1.2))
    assert summary["cold_tps"] == pytest.approx(40 / token)
    assert summary["server_gib"]["kv"] == pytest.approx(16 * 0.75)
    assert summary["server_gib"]["weights"] == pytest.approx(1.0 + 64 * 0.25)
    assert summary["server_gib"]["total"] == pytest.approx(sum(summary["server_gib"][k] for k in
                                                               ("weights", "kv", "recurrent", "compute", "output")))
    # the device's figure keeps what is not a buffer (CUDA context) and adds what the buffers grew by
    assert summary["device_gib"] - summary["server_gib"]["total"] == pytest.approx(
        _record(16, 4)["device_gib"] - _record(16, 4)["server_gib"]["total"])
    assert summary["from_depths"] == [4, 16] and summary["estimate_gib"] == {"total": 28.16}
    checked = table.size_summary("27b", info, [_record(4, 1), _record(16, 4), _record(64, 16)])
    assert checked["check"]["measured"]["decode1_tps"] == pytest.approx(1 / token)
    assert checked["decode1_tps"] == pytest.approx(1 / token)      # the line, not the check, gives the row


# ---------------------------------------------------------------- the table

def _results(table) -> dict:
    info = {"model": "qwen3.5-27b", "quant": "Q4_K_M", "full_layers": 64, "full_kv_layers": 16,
            "estimate_gib": {"weights": 14.59, "kv": 12.0, "recurrent": 0.29, "compute": 0.78, "cuda": 0.5,
                             "total": 28.16}}
    records = [_record(4, 1), _record(16, 4)]
    steps = [{"step": "write-27b", "kind": "write", "status": "ok", "why": "", "seconds": 40.0,
              "record": {"model": "qwen3.5-27b", "quant": "Q4_K_M", "layers": 4, "how": "chain"}},
             {"step": "write-9b", "kind": "write", "status": "skipped", "why": "12 s of the 540 s budget left",
              "seconds": 0.0, "record": None},
             *[{"step": f"serve-27b@{r['layers']}", "kind": "serve", "status": "ok", "why": "", "seconds": 9.0,
                "record": {**r, "estimate_gib": info["estimate_gib"]}} for r in records],
             {"step": "side-2b", "kind": "side", "status": "ok", "why": "", "seconds": 30.0,
              "record": {"model": "qwen3.5-2b", "quant": "Q8_0", "layers": 24, "n_ctx": 262144, "parallel": 2,
                         "servers": 2, "how": "x", "busy": [
                             {"servers": 1, "streams": 2, "tps": 400.0, "tokens_each": 256, "device_gib": 6.0},
                             {"servers": 2, "streams": 4, "tps": 700.0, "tokens_each": 256, "device_gib": 12.0}]}}]
    return {"mode": "gpu", "device": {"name": "NVIDIA H200"}, "about": "what ran", "steps": steps,
            "summaries": [table.size_summary("27b", info, records)]}


def test_the_table_has_a_row_for_every_step_busy_set_and_size(table, tmp_path):
    results = _results(table)
    rows = table.write_table(tmp_path, results)
    assert [r["step"] for r in rows] == ["write-27b", "write-9b", "serve-27b@4", "serve-27b@16", "side-2b",
                                         "side-2b x1", "side-2b x2", "27b at 64 layers"]
    with open(tmp_path / "table.csv", newline="") as handle:
        read = list(csv.DictReader(handle))
    assert list(read[0]) == [key for key, _ in table.COLUMNS]
    assert [r["step"] for r in read] == [r["step"] for r in rows]
    scaled = read[-1]
    assert scaled["kind"] == "scaled" and float(scaled["estimate_gib"]) == 28.16
    assert float(scaled["kv_gib"]) == pytest.approx(12.0) and "line through depths 4, 16" in scaled["how"]
    assert read[1]["status"] == "skipped" and "budget" in read[1]["why"]
    md = (tmp_path / "table.md").read_text().splitlines()
    body = [line for line in md if line.startswith("| ") and not line.startswith("| step")]
    assert len(body) == len(rows) and md[0] == "# Serving kit: NVIDIA H200 (gpu)"
    assert any("skipped: 12 s of the 540 s budget left" in line for line in body)
    assert md[-1] == "Not measured: write-9b (status column)."
    assert "| 196,608 × 2 |" in body[2]


def test_a_gpu_runs_table_is_the_recorded_memory_table_the_footprint_is_held_to(table, tmp_path):
    # issue 53 item 2: the kit's CSV, once recorded under benchmarks/recorded/, is what
    # tests/test_measured_serving.py holds the footprint's serving estimate to (footprint/measured.py)
    from metrobench.footprint import measured

    results = _results(table)
    for step in results["steps"]:
        if step["kind"] == "serve":
            step["record"]["device_how"] = "nvidia-smi, the server's process"
    table.write_table(tmp_path, results)
    assert measured.recorded_tables(tmp_path) == [tmp_path / "table.csv"]
    [row] = [r for r in measured.read_table(tmp_path / "table.csv") if r.server_reported_mib is not None]
    scaled = results["summaries"][0]
    assert (row.size, row.quant, row.n_ctx, row.slots) == ("27b", "Q4_K_M", 196608, 2)
    assert row.nvidia_smi_mib == pytest.approx(scaled["device_gib"] * 1024, abs=0.1)
    assert row.server_reported_mib == pytest.approx(scaled["server_gib"]["total"] * 1024, abs=0.1)
    assert row.estimate_mib == pytest.approx(28.16 * 1024, abs=0.1)
    # a CPU rehearsal's resident memory is no nvidia-smi figure: its rows are not held to the estimate
    cpu = _results(table)
    (tmp_path / "cpu").mkdir()
    table.write_table(tmp_path / "cpu", cpu)
    assert all(r.nvidia_smi_mib is None for r in measured.read_table(tmp_path / "cpu" / "table.csv"))


# ---------------------------------------------------------------- GGUF depth, the packed tree, the widths

def _small_gguf(path: Path, blocks: int = 4) -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_block_count(blocks)
    writer.add_uint32("qwen35.full_attention_interval", 4)
    writer.add_array("qwen35.attention.recurrent_layers", [i % 4 != 3 for i in range(blocks)])
    writer.add_array("qwen35.rope.dimension_sections", [2, 1, 1, 0])       # 4 entries: never a per-block array
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(300)])
    writer.add_tensor("token_embd.weight", np.full((300, 8), 0.5, dtype=np.float32))
    for i in range(blocks):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.full((8,), float(i), dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", np.full((16, 8), float(i), dtype=np.float16))
    writer.add_tensor("output.weight", np.full((300, 8), 2.0, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_grown_or_cut_keeps_each_blocks_bytes_and_the_layer_pattern(tmp_path):
    gguf = pytest.importorskip("gguf")
    from metrobench.training.gguf_depth import with_blocks

    src = _small_gguf(tmp_path / "four.gguf")
    grown = with_blocks(src, tmp_path / "ten.gguf", 10)
    cut = with_blocks(src, tmp_path / "two.gguf", 2)
    reader = gguf.GGUFReader(str(grown))
    assert reader.get_field("qwen35.block_count").contents() == 10
    assert reader.get_field("qwen35.attention.recurrent_layers").contents() == [i % 4 != 3 for i in range(10)]
    assert reader.get_field("qwen35.rope.dimension_sections").contents() == [2, 1, 1, 0]
    assert len(reader.get_field("tokenizer.ggml.tokens").contents()) == 300
    tensors = {t.name: t for t in reader.tensors}
    assert sorted(n for n in tensors if n.startswith("blk.")) == sorted(
        f"blk.{i}.{w}" for i in range(10) for w in ("attn_norm.weight", "ffn_up.weight"))
    for i in range(10):                                     # block i is the source's block i % 4
        assert float(tensors[f"blk.{i}.ffn_up.weight"].data.flat[0]) == i % 4
        assert tensors[f"blk.{i}.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert float(tensors["output.weight"].data.flat[0]) == 2.0
    small = gguf.GGUFReader(str(cut))
    assert small.get_field("qwen35.block_count").contents() == 2
    assert small.get_field("qwen35.attention.recurrent_layers").contents() == [True, True]
    assert {t.name for t in small.tensors} == {"token_embd.weight", "output.weight", "blk.0.attn_norm.weight",
                                               "blk.0.ffn_up.weight", "blk.1.attn_norm.weight",
                                               "blk.1.ffn_up.weight"}
    from metrobench.footprint.architectures import header_arch

    assert (header_arch(grown).layers, header_arch(grown).kv_layers) == (10, 2)


def test_a_file_that_is_not_a_gguf_is_one_error_naming_it(tmp_path):
    from metrobench.errors import MetrobenchError
    from metrobench.training.gguf_depth import with_blocks

    bad = tmp_path / "page.gguf"
    bad.write_bytes(b"<html>not found</html>")
    with pytest.raises(MetrobenchError, match="page.gguf: not a GGUF file"):
        with_blocks(bad, tmp_path / "out.gguf", 4)
    assert not (tmp_path / "out.gguf").exists()
    with pytest.raises(MetrobenchError, match="5000 blocks"):
        with_blocks(_small_gguf(tmp_path / "four.gguf"), tmp_path / "out.gguf", 5000)


def test_the_packed_tree_has_cuda_the_server_and_the_converter_and_nothing_else():
    pack = _load("pack_llama", KIT / "pack_llama.py")
    keep = ["CMakeLists.txt", "ggml/CMakeLists.txt", "ggml/src/ggml.c", "ggml/src/CMakeLists.txt",
            "ggml/src/ggml-cuda/mmq.cu", "ggml/src/ggml-cuda/template-instances/mmq-instance-q4_k.cu",
            "ggml/src/ggml-cpu/ops.cpp", "tools/server/server.cpp", "tools/quantize/quantize.cpp",
            "tools/ui/CMakeLists.txt", "convert_hf_to_gguf.py", "conversion/qwen.py", "gguf-py/gguf/quants.py",
            "src/llama.cpp", "common/common.cpp", "vendor/nlohmann/json.hpp",
            "scripts/ui-assets.cmake"]                     # the server's build runs it, with the UI off
    drop = ["ggml/src/ggml-vulkan/ggml-vulkan.cpp", "ggml/src/ggml-metal/ggml-metal.m", "tests/test-backend-ops.cpp",
            "docs/build.md", "models/ggml-vocab-llama-bpe.gguf", "tools/ui/src/app.html", "tools/server/tests/x.py",
            "examples/simple/simple.cpp", "conversion/__pycache__/qwen.cpython-311.pyc", ".git/HEAD",
            "scripts/sync_vendor.py"]
    assert [p for p in keep if not pack.kept(p)] == []
    assert [p for p in drop if pack.kept(p)] == []


def test_the_rehearsals_widths_are_tiny_but_its_depths_vocabulary_and_experts_are_real(serve):
    for size in serve.SIZES:
        real, tiny = serve.widths(size, False), serve.widths(size, True)
        assert tiny["hidden_size"] == 64 and real["hidden_size"] >= 2048
        assert (tiny["num_hidden_layers"], tiny["vocab_size"], tiny["layer_types"]) == \
            (real["num_hidden_layers"], real["vocab_size"], real["layer_types"])
        assert ("num_experts" in tiny) == ("num_experts" in real) == (size.name == "35b-a3b")
        assert max(size.depths) <= real["num_hidden_layers"] and serve.CHAIN_LAYERS in size.depths


def test_the_35b_a3b_widths_give_a_35b_moe_of_the_footprint_tables_shape():
    pytest.importorskip("transformers")
    import math

    from metrobench.footprint.architectures import table_arch
    from metrobench.training.random_weights import model_class, tensor_shapes

    doc = json.loads((KIT / "configs" / "qwen3_5-35b-a3b.json").read_text())
    config = doc["text_config"]
    assert doc["sources"] and set(doc["provisional"]) <= set(config)
    assert model_class(config) == "Qwen3_5MoeForCausalLM"
    count = sum(math.prod(s) for s in tensor_shapes(config).values())
    assert 33e9 < count < 36e9, count
    arch = table_arch("Qwen3.5-35B-A3B-Q4_K_M.gguf")
    assert (arch.layers, arch.kv_layers, arch.hidden, arch.kv_heads) == (
        config["num_hidden_layers"], config["layer_types"].count("full_attention"), config["hidden_size"],
        config["num_key_value_heads"])


def test_build_sh_llama_without_a_kit_is_one_error_line(tmp_path):
    done = subprocess.run([str(KIT / "build.sh"), "--llama", str(tmp_path / "b")], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "GPU_KIT": str(tmp_path / "nokit")}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"build.sh: error: {tmp_path}/nokit/llama.cpp.tar.xz: no llama.cpp tree in the kit (build.sh builds it)"]


# ---------------------------------------------------------------- the rehearsal, end to end

@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    for module in ("torch", "transformers", "gguf", "llama_cpp", "httpx"):
        pytest.importorskip(module)
    from metrobench.agents.serving import find_llama_server

    try:
        find_llama_server()
    except Exception as exc:  # noqa: BLE001 - no llama-server here: nothing to rehearse with
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("serve") / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_KIT": "none", "SERVE_BUDGET": "900",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(KIT / "serve.sh"), "--cpu", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_serve_sh_cpu_writes_the_whole_table(rehearsal, serve):
    out = rehearsal
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.xz", "results.json", "table.csv", "table.md"]
    results = json.loads((out / "results.json").read_text())
    expected = [f"write-{s.name}" for s in serve.SIZES]
    for size in serve.SIZES:
        expected += [f"serve-{size.name}@{d}" for d in size.depths]
        if size.name == serve.SIDE_SIZE:
            expected.append(f"side-{size.name}")
    expected.append(f"serve-{serve.CHECK[0]}@{serve.CHECK[1]}")
    assert [s["step"] for s in results["steps"]] == expected
    assert [s["status"] for s in results["steps"]] == ["ok"] * len(expected), \
        [(s["step"], s["status"], s["why"]) for s in results["steps"] if s["status"] != "ok"]
    assert [s["size"] for s in results["summaries"]] == [s.name for s in serve.SIZES]
    with open(out / "table.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    table = _load("serve_table", KIT / "serve_table.py")
    assert list(rows[0]) == [key for key, _ in table.COLUMNS]
    kinds = [r["kind"] for r in rows]
    assert kinds.count("serve") == sum(len(s.depths) for s in serve.SIZES) + 1
    assert kinds.count("side-by-side") == serve.SIDE_SERVERS and kinds.count("scaled") == len(serve.SIZES)
    assert kinds.count("check") == 2                       # the 2B at 24 layers, the 27B at 64
    md = (out / "table.md").read_text().splitlines()
    assert len([ln for ln in md if ln.startswith("| ") and not ln.startswith("| step")]) == len(rows)


@pytest.mark.slow
def test_serve_sh_cpus_figures_are_positive_and_agree_where_llama_cpp_makes_them(rehearsal):
    results = json.loads((rehearsal / "results.json").read_text())
    serves = [s["record"] for s in results["steps"] if s["kind"] == "serve"]
    for r in serves:
        measured, estimate = r["server_gib"], r["estimate_gib"]
        assert min(measured[k] for k in ("weights", "kv", "recurrent", "compute", "output")) > 0, r
        assert r["device_gib"] > 0 and r["layers"] == r["kv_layers"] * 4
        # the footprint estimate's KV cache and recurrent state are llama.cpp's own arithmetic
        assert measured["kv"] == pytest.approx(estimate["kv"], rel=1e-3)
        assert measured["recurrent"] == pytest.approx(estimate["recurrent"], rel=0.05, abs=0.01 / 1024)
        assert r["cold"]["tokens"] == results["rows"][_size(r)]["prompt_tokens"]
        assert 0 < r["warm"]["processed"] < r["cold"]["tokens"] <= r["warm"]["cached"] + r["warm"]["processed"]
        assert r["warm"]["cached"] > 0                       # the prefix came from the cache
        assert r["decode1"]["tokens"] > 0 and len(r["decode2"]["tokens"]) == 2
        assert min(r["cold"]["ms"], r["warm"]["ms"], r["decode1"]["ms"], *r["decode2"]["ms"]) > 0
    by_size: dict[str, dict[int, dict]] = {}
    for r in serves:
        by_size.setdefault(_size(r), {})[r["layers"]] = r
    for size, depths in by_size.items():
        assert depths[16]["server_gib"]["kv"] == pytest.approx(4 * depths[4]["server_gib"]["kv"], rel=1e-3)
        assert depths[16]["server_gib"]["compute"] == pytest.approx(depths[4]["server_gib"]["compute"], rel=0.01)
        assert depths[16]["block_bytes"] == 4 * depths[4]["block_bytes"]
    for summary in results["summaries"]:
        assert min(v for k, v in summary.items() if k.endswith("_tps")) > 0
        assert summary["server_gib"]["total"] > 0 and summary["estimate_gib"]["total"] > 0
        if "check" in summary:                              # the scaling against the full depth measured
            assert summary["server_gib"]["total"] == pytest.approx(summary["check"]["measured"]["server_gib"]
                                                                   ["total"], rel=0.01)
    side = next(s["record"] for s in results["steps"] if s["kind"] == "side")
    assert [b["servers"] for b in side["busy"]] == [1, 2, 3]
    held = [b["device_gib"] for b in side["busy"]]
    assert all(b["tps"] > 0 for b in side["busy"]) and held[0] < held[1] < held[2]


def _size(record: dict) -> str:
    return record["model"].removeprefix("qwen3.5-")


@pytest.mark.parametrize("parts", [1, 3])
def test_build_sh_llama_unpacks_binaries_brought_back_from_the_same_tree_instead_of_compiling(tmp_path, parts):
    import hashlib
    import tarfile

    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "llama.cpp.tar.xz").write_bytes(b"a tree")
    key = hashlib.sha256(b"a tree").hexdigest()[:16] + " 90-real"
    staged = tmp_path / "staged"
    for name, data in ((".key", key + "\n"), ("host/bin/llama-quantize", "#!/bin/sh\n"),
                       ("cuda/bin/llama-server", "#!/bin/sh\n"), ("cuda/bin/libggml-cuda.so", "")):
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_text(data)
    (staged / "cuda" / "bin" / "libggml-cuda.so").write_bytes(os.urandom(200_000))      # some bytes to split
    with tarfile.open(tmp_path / "llama-bin.tar.xz", "w:xz") as tar:
        for name in (".key", "host", "cuda"):
            tar.add(staged / name, arcname=name)
    packed = (tmp_path / "llama-bin.tar.xz").read_bytes()
    if parts == 1:
        (kit / "llama-bin.tar.xz").write_bytes(packed)
    else:                                                   # as serve.sh splits what is over 15 MiB
        step = -(-len(packed) // parts)
        for i in range(parts):
            (kit / f"llama-bin.tar.xz.part{i}").write_bytes(packed[i * step:(i + 1) * step])
    build = tmp_path / "build"
    env = {**os.environ, "GPU_KIT": str(kit)}
    done = subprocess.run([str(KIT / "build.sh"), "--llama", str(build)], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "prebuilt binaries" in done.stdout
    assert (build / ".quantize-ready").read_text().strip() == f"{build}/host/bin/llama-quantize"
    assert (build / ".server-ready").read_text().strip() == f"{build}/cuda/bin/llama-server"
    assert (build / "cuda" / "bin" / "libggml-cuda.so").read_bytes() == \
        (staged / "cuda" / "bin" / "libggml-cuda.so").read_bytes()
    assert not (build / "src").exists() and not (build / "llama-bin.tar.xz").exists()
    # binaries for another architecture are not taken: the tree is unpacked to be compiled (here it is no tree)
    env["CUDA_ARCH"] = "120-real"
    other = subprocess.run([str(KIT / "build.sh"), "--llama", str(tmp_path / "b2")], cwd=REPO, capture_output=True,
                           text=True, env=env, timeout=60)
    assert other.returncode != 0 and "prebuilt" not in other.stdout
    assert not (tmp_path / "b2" / ".server-ready").exists()


@pytest.mark.parametrize("size", ["2b", "35b-a3b"])
def test_a_random_folder_holds_what_the_transformers_class_saves(tmp_path, serve, size, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    from metrobench.training import random_weights

    monkeypatch.setattr(random_weights, "SHARD_BYTES", 2**20)             # several shards at this width
    config = serve.widths(next(s for s in serve.SIZES if s.name == size), cpu=True)
    tokenizer = serve.load_tokenizer(serve.tokenizer_folder(REPO / "build" / "gpu-kit", tmp_path))
    folder = random_weights.random_folder(config, tmp_path / "hf", tokenizer, layers=4)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shapes = random_weights.tensor_shapes(config, 4)
    assert sorted(index["weight_map"]) == sorted(shapes) and len(set(index["weight_map"].values())) > 1
    assert ("lm_head.weight" in shapes) == (not config["tie_word_embeddings"])
    for name, shard in list(index["weight_map"].items())[:12]:
        with safe_open(str(folder / shard), "pt") as handle:
            tensor = handle.get_tensor(name)
        assert tuple(tensor.shape) == shapes[name] and str(tensor.dtype) == "torch.bfloat16"
        assert tensor.float().abs().sum() > 0
    saved = json.loads((folder / "config.json").read_text())
    assert saved["num_hidden_layers"] == 4 and saved["mtp_num_hidden_layers"] == 1
    assert saved["architectures"] == [random_weights.model_class(config)]
    assert ("model_type" in saved) == (size != "35b-a3b")    # the MoE's would make AutoTokenizer swap the tokenizer
    assert (folder / "tokenizer.json").is_file()


# ---------------------------------------------------------------- run.sh: which half, told neither
def test_run_sh_told_neither_half_measures_serving_until_a_gpu_serving_table_is_recorded(tmp_path):
    """next_half.py: no table, or a table from ``serve.sh --cpu`` (no nvidia-smi figure): the serving
    half; a serving table with an nvidia-smi figure: the training half."""
    script = KIT / "next_half.py"

    def half(root: Path) -> list[str]:
        done = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    assert half(tmp_path / "nowhere") == ["serve", f"no serving table measured on a GPU is recorded under "
                                                   f"{tmp_path / 'nowhere'} yet"]
    header = "size,quant,n_ctx,slots,server_reported_mib,nvidia_smi_mib,estimate_mib"
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "table.csv").write_text(f"{header}\n2b,Q8_0,4096,2,120,,130\n")
    assert half(tmp_path)[0] == "serve"
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "table.csv").write_text(f"{header}\n2b,Q8_0,262144,2,5000,5500,5923\n")
    assert half(tmp_path) == ["train", f"a serving table measured on a GPU is recorded ({tmp_path / 'gpu' / 'table.csv'})"]


def test_run_sh_refuses_an_option_it_does_not_know_before_doing_anything(tmp_path):
    done = subprocess.run([str(KIT / "run.sh"), "--serving", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "run.sh: error: unknown option --serving\n"
    assert not (tmp_path / "out").exists()

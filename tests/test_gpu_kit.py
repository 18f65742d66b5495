"""The GPU kit (scripts/gpu-kit/, benchmarks/real_width_qlora.py), checked on the CPU.

No GPU has run the kit yet; these tests keep what a GPU run depends on true here:
the bitsandbytes repack is reproducible and keeps only what it says, the Qwen3.5
configs have the widths their sources give, the measurement trains through the
project's own ``build_trainer`` (not a trainer of its own), and ``run.sh --cpu``
writes the full table at a tiny width.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "scripts" / "gpu-kit"
STEPS = ["layer-27b-torch", "layer-27b-fast", "27b-paper", "27b-corrected", "27b-paper-lora-other",
         "9b-paper", "4b-paper", "2b-paper"]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_bnb_wheel(path: Path) -> Path:
    files = {
        "bitsandbytes/__init__.py": b"__version__ = '0'\n",
        "bitsandbytes/libbitsandbytes_cpu.so": b"cpu" * 100,
        "bitsandbytes/libbitsandbytes_cuda118.so": b"118" * 100,
        "bitsandbytes/libbitsandbytes_cuda130.so": b"130" * 100,
        "bitsandbytes/libbitsandbytes_cuda132.so": b"132" * 100,
        "bitsandbytes/libbitsandbytes_rocm64.so": b"rocm" * 100,
        "bitsandbytes/cuda_specs.py": b"# libbitsandbytes_cuda118.so is named here, not dropped\n",
        "bitsandbytes-0.50.2.dist-info/METADATA": b"Name: bitsandbytes\nVersion: 0.50.2\n",
        "bitsandbytes-0.50.2.dist-info/WHEEL": b"Wheel-Version: 1.0\n",
        "bitsandbytes-0.50.2.dist-info/RECORD": b"stale\n",
    }
    wheel = path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in reversed(files.items()):     # unsorted on purpose
            archive.writestr(name, data)
    return wheel


def test_repack_keeps_the_named_libraries_and_is_the_same_bytes_twice(tmp_path):
    repack = _load("repack_wheel", KIT / "repack_wheel.py")
    wheel = _fake_bnb_wheel(tmp_path)
    first, gone = repack.repack(wheel, tmp_path / "a", {"cpu", "cuda130"})
    second, _ = repack.repack(wheel, tmp_path / "b", {"cpu", "cuda130"})
    assert first.read_bytes() == second.read_bytes()
    assert [Path(g).name for g in gone] == ["libbitsandbytes_cuda118.so", "libbitsandbytes_cuda132.so",
                                           "libbitsandbytes_rocm64.so"]
    with zipfile.ZipFile(first) as archive:
        names = archive.namelist()
        assert names[-1] == "bitsandbytes-0.50.2.dist-info/RECORD"
        assert names[:-1] == sorted(names[:-1])
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert "bitsandbytes/libbitsandbytes_cuda130.so" in names and "bitsandbytes/cuda_specs.py" in names
        record = archive.read(names[-1]).decode().splitlines()
        assert len(record) == len(names)
        for line in record[:-1]:                       # every kept file, with its own hash and size
            name, digest, size = line.split(",")
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))


@pytest.mark.parametrize("size,params", [("2b", (1.7e9, 2.5e9)), ("4b", (3.8e9, 4.8e9)),
                                         ("9b", (8.5e9, 9.5e9)), ("27b", (26e9, 28e9))])
def test_configs_build_a_qwen3_5_of_the_named_size(size, params):
    pytest.importorskip("transformers")
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    doc = json.loads((KIT / "configs" / f"qwen3_5-{size}.json").read_text())
    assert doc["sources"] and set(doc["provisional"]) <= set(doc["text_config"])
    config = doc["text_config"]
    assert config["vocab_size"] == 248_320 and len(config["layer_types"]) == config["num_hidden_layers"]
    assert config["layer_types"][3::4] == ["full_attention"] * (config["num_hidden_layers"] // 4)
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**config))
    count = sum(p.numel() for p in model.parameters())
    assert params[0] < count < params[1], count


def test_the_27b_config_is_issue_38s_arithmetic():
    config = json.loads((KIT / "configs" / "qwen3_5-27b.json").read_text())["text_config"]
    full = config["layer_types"].count("full_attention")
    kv_bytes_a_token = full * 2 * config["num_key_value_heads"] * config["head_dim"] * 2   # K and V, f16
    assert (config["num_hidden_layers"], full, kv_bytes_a_token) == (64, 16, 64 * 1024)
    assert config["tie_word_embeddings"] is False


def test_the_measurement_trains_with_the_projects_build_trainer(tmp_path, monkeypatch):
    for module in ("torch", "transformers", "peft", "trl", "datasets", "bitsandbytes"):
        pytest.importorskip(module)
    from metrobench.training import train

    real = train.build_trainer
    calls = []

    def recorded(recipe, rows, base_dir, tokenizer, work, **kwargs):
        calls.append({"recipe": recipe, "rows": len(rows), "base_dir": base_dir})
        return real(recipe, rows, base_dir, tokenizer, work, **kwargs)

    monkeypatch.setattr(train, "build_trainer", recorded)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    bench = _load("real_width_qlora", REPO / "benchmarks" / "real_width_qlora.py")
    out = tmp_path / "4b.json"
    assert bench.main(["--cpu", "--size", "4b", "--recipe", str(REPO / "peft/recipes/4b.yaml"),
                       "--cpu-length", "32", "--out", str(out)]) == 0
    assert len(calls) == 1
    recipe = calls[0]["recipe"]
    assert (recipe.max_steps, recipe.max_length, recipe.batch_size, recipe.loss) == (2, 32, 2, "text")
    record = json.loads(out.read_text())
    assert record["steps"] == 2 and len(record["step_seconds"]) == 2 and len(record["losses"]) == 2
    assert record["recipe_max_length"] == 4096 and record["seq"] == 32
    assert record["model_build"]["quantization"]["bnb_4bit_quant_type"] == "nf4"
    assert record["model_build"]["quantization"]["bnb_4bit_use_double_quant"] is True
    assert record["adapter_dtypes"] and record["gated_delta_ran"] == "PyTorch chunk loop"
    assert record["shape"]["tie_word_embeddings"] is True           # the 4B's, at the tiny width
    source = (REPO / "benchmarks" / "real_width_qlora.py").read_text()
    assert "SFTTrainer(" not in source and "Trainer(" not in source


@pytest.mark.slow
def test_run_sh_cpu_writes_the_full_table(tmp_path):
    for module in ("torch", "transformers", "peft", "trl", "datasets", "bitsandbytes"):
        pytest.importorskip(module)
    version = "%d.%d" % sys.version_info[:2]
    kit = REPO / "build" / f"gpu-kit-py{version}"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_KIT": str(kit) if (kit / ".gpu-kit").is_file() else "none",
           "GPU_KIT_BUDGET": "900"}
    out = tmp_path / "out"
    done = subprocess.run([str(KIT / "run.sh"), "--cpu", "--train", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert [s["step"] for s in results["steps"]] == STEPS
    assert [s["status"] for s in results["steps"]] == ["ok"] * len(STEPS), results["steps"]
    table = (out / "table.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| ") and not line.startswith("| step")]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == STEPS
    assert all(" ok " in r and "(tiny width)" in r for r in rows)
    corrected = next(s["record"] for s in results["steps"] if s["step"] == "27b-corrected")
    assert (corrected["recipe_max_length"], corrected["batch"]) == (7168, 1)
    other = next(s["record"] for s in results["steps"] if s["step"] == "27b-paper-lora-other")
    assert other["lora_dtype"]["asked"] == "other"

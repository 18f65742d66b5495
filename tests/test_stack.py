"""The locked Python stack: constraints/stack.txt, `make install`'s use of it, and doctor's drift and training path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metrobench import doctor, stack
from metrobench.cli import main
from metrobench.commands.common import load_study
from metrobench.errors import MetrobenchError

REPO = Path(__file__).resolve().parents[1]
#: What issue 38 asks the lock to hold at least: the training and serving stack.
STACK = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets", "tokenizers",
         "safetensors", "huggingface-hub", "gguf", "llama-cpp-python", "snakemake", "numpy", "pandas", "pyarrow",
         "pydantic")


def test_the_lock_pins_the_whole_stack_exactly_and_once():
    pins = {p.name: p for p in stack.read_pins(REPO / stack.CONSTRAINTS)}
    assert set(STACK) <= set(pins)
    assert all(p.spec.startswith("==") for p in pins.values())
    assert pins["torch"].spec == "==2.13.0"               # no local label: CPU and CUDA wheels alike
    assert pins["llama-cpp-python"].spec == "==0.3.36"    # the version scripts/install-llama-cpp.sh builds
    assert "metrobench" not in pins


def test_this_environment_is_the_locked_one():
    """`make install` installs with the lock: every pinned package present here is at its pinned version."""
    pins = stack.read_pins(REPO / stack.CONSTRAINTS)
    assert [d.phrase() for d in stack.drift(pins) if d.installed] == []


def test_pins_are_read_with_comments_markers_and_pip_normalised_names(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("# the lock\n\nTorch==2.13.0  # CPU and CUDA\nllama_cpp.python==0.3.36\n"
                    "causal-conv1d==1.7.0 ; platform_system == 'Windows'\n")
    assert stack.read_pins(path) == [stack.Pin("torch", "==2.13.0", 3, True),
                                     stack.Pin("llama-cpp-python", "==0.3.36", 4, True),
                                     stack.Pin("causal-conv1d", "==1.7.0", 5, False)]


@pytest.mark.parametrize("text, message", [
    ("torch==2.13.0\nnumpy==2.4.6\nTORCH==2.12.0\n", "line 3: torch is pinned twice (first on line 1); keep one"),
    ("llama-cpp-python==0.3.36\nllama_cpp_python==0.3.35\n",
     "line 2: llama-cpp-python is pinned twice (first on line 1); keep one"),
    ("torch=2.13.0\n", "line 1: 'torch=2.13.0' is not a pin"),
    ("--index-url https://example.invalid/simple\n", "line 1: '--index-url https://example.invalid/simple': "
                                                     "only pins belong here"),
    ("torch\n", "line 1: 'torch': a pin is a name and a version"),
])
def test_a_bad_constraints_file_is_one_error_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "stack.txt"
    path.write_text(text)
    with pytest.raises(MetrobenchError) as caught:
        stack.read_pins(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_drift_compares_as_pip_does():
    pins = [stack.Pin("torch", "==2.13.0", 1, True), stack.Pin("transformers", "==5.25.0", 2, True),
            stack.Pin("trl", "==1.16.0", 3, True), stack.Pin("causal-conv1d", "==1.7.0", 4, False)]
    installed = {"torch": "2.13.0+cu128", "transformers": "5.26.0"}
    assert stack.drift(pins, installed.get) == [stack.Drift("transformers", "==5.25.0", "5.26.0"),
                                                stack.Drift("trl", "==1.16.0", None)]


def _lock(tmp_path: Path, text: str) -> Path:
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints" / "stack.txt").write_text(text)
    return tmp_path


def test_doctor_shows_drift_and_missing_packages_as_warnings_never_the_kernels(tmp_path):
    checkout = _lock(tmp_path, "torch==2.13.0\ntransformers==5.25.0\npeft==0.21.2\ntrl==1.16.0\n"
                               "flash-linear-attention==0.6.0\n")
    installed = {"torch": "2.13.0+cpu", "transformers": "5.26.0", "peft": "0.21.2"}
    checks = doctor.check_stack(checkout, installed.get)
    assert [(c.status, c.name, c.detail) for c in checks] == [
        ("warn", "python stack", f"1 of 5 pinned packages differ from {checkout}/constraints/stack.txt: "
                                 "transformers 5.26.0 (pinned ==5.25.0); `make install` installs the pinned versions"),
        ("warn", "python stack", "1 of 5 pinned packages not installed: trl (`make install`)")]
    met = doctor.check_stack(checkout, {**installed, "transformers": "5.25.0", "trl": "1.16.0"}.get)
    assert [(c.status, c.detail) for c in met] == [("ok", f"{checkout}/constraints/stack.txt: all 4 pins met (the 1 of "
                                                          "the gated-delta kernels not installed: see the training path)")]


def test_doctor_stops_on_a_lock_naming_a_package_twice(monkeypatch, tmp_path, root, capsys):
    checkout = _lock(tmp_path, "torch==2.13.0\ntorch==2.12.0\n")
    monkeypatch.setattr(stack, "CONSTRAINTS", checkout / "constraints" / "stack.txt")
    config = tmp_path / "study.yaml"
    config.write_text("systems: [marta]\n")
    assert main(["doctor", "--data", str(root), "--config", str(config), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"metrobench: error: {checkout}/constraints/stack.txt: line 2: torch is pinned twice "
                   "(first on line 1); keep one"]


def test_training_path_and_its_cost_for_the_paper_students(monkeypatch):
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/config.yaml"]))
    reference = "PyTorch reference path (flash-linear-attention and causal-conv1d not installed)"
    [slow] = doctor.check_training_path(needs, path_of=lambda: reference, cuda=True)
    assert (slow.status, slow.name) == ("warn", "training path")
    assert slow.detail == ("2b, 4b, 9b, 27b: gated-delta layers on the PyTorch reference path (flash-linear-attention "
                           "and causal-conv1d not installed): the PyTorch chunk loop, slower than the paper's "
                           "27–103 min a seed (RTX 5090) that the plan assumes; on the CUDA machine "
                           "`make install TRAIN_CUDA=1` installs the kernels")
    [fast] = doctor.check_training_path(needs, path_of=lambda: "flash-linear-attention + causal-conv1d kernels",
                                        cuda=True)
    assert fast.status == "ok" and "about the paper's 27–103 min a seed" in fast.detail
    [half] = doctor.check_training_path(
        needs, path_of=lambda: "flash-linear-attention kernels (the other part on the PyTorch path)", cuda=True)
    assert half.status == "warn" and "chunk loop" not in half.detail and "slower than" in half.detail


def test_fla_on_hopper_with_a_triton_it_refuses_fails_before_the_run(monkeypatch):
    # What the GPU kit met on an H200: fla 0.6.0 stops at the first backward with Triton 3.4-3.7.0.
    monkeypatch.chdir(REPO)
    needs = doctor.read_needs(load_study(["config/config.yaml"]))
    fast = "flash-linear-attention + causal-conv1d kernels"
    [hopper] = doctor.check_training_path(needs, path_of=lambda: fast, cuda=True,
                                          gpu_and_triton=lambda: ((9, 0), "3.6.0"))
    assert hopper.status == "FAIL" and "Triton 3.6.0 (>= 3.4.0 and < 3.7.1)" in hopper.detail
    for gpu, triton in [((9, 0), "3.7.1"), ((12, 0), "3.6.0"), ((9, 0), "3.3.1+git1234"), ((9, 0), None)]:
        [check] = doctor.check_training_path(needs, path_of=lambda: fast, cuda=True,
                                             gpu_and_triton=lambda: (gpu, triton))
        assert check.status == "ok", (gpu, triton)
    assert doctor.fla_refusal((9, 0), "3.4.0+cu130") is not None


def test_training_path_of_the_cpu_studies_needs_no_kernels(monkeypatch):
    monkeypatch.chdir(REPO)
    [demo] = doctor.check_training_path(doctor.read_needs(load_study(["config/demo.yaml"])))
    assert (demo.status, demo.detail) == ("ok", "smollm2: no gated-delta layers (no kernels needed)")
    assert doctor.check_training_path(doctor.StudyNeeds()) == []


def _make_n(*args: str) -> str:
    done = subprocess.run(["make", "-n", "-C", str(REPO), "install", "VENV=/nonexistent/venv", *args],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_install_uses_the_lock_and_adds_the_kernels_with_cuda_arguments():
    plain = _make_n()
    assert "pip install --progress-bar off -c constraints/stack.txt -e ." in plain
    assert "install-train-cuda.sh" not in plain
    assert "scripts/install-train-cuda.sh /nonexistent/venv" in _make_n("TRAIN_CUDA=1")
    cuda = _make_n("LLAMA_CMAKE_ARGS=-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=120")
    assert "scripts/install-train-cuda.sh /nonexistent/venv" in cuda
    assert "install-train-cuda.sh" not in _make_n("LLAMA_CMAKE_ARGS=-DGGML_CUDA=ON", "TRAIN_CUDA=0")


def test_the_kernel_installer_leaves_a_cpu_torch_alone(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.version.cuda:
        pytest.skip("a CUDA torch: the installer would install the kernels here")
    venv = Path(sys.prefix)
    done = subprocess.run([str(REPO / "scripts" / "install-train-cuda.sh"), str(venv)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "is a CPU build: the gated-delta kernels need CUDA torch; not installed" in done.stdout
    assert not (venv / ".train-cuda").exists()


def test_the_cpu_studies_training_peak_is_the_measured_one_against_free_ram(monkeypatch):
    monkeypatch.chdir(REPO)
    demo = load_study(["config/demo.yaml"])
    peak = doctor.training_peak_gb(__import__("metrobench.training.recipe", fromlist=["x"]).load_recipe(
        "peft/recipes/smollm2.yaml"))
    assert peak is not None and 0 < peak < 4.0     # issue 38: the CPU studies fit a laptop
    [ok] = doctor.check_training_memory(demo, free_ram=lambda: 16.0)
    assert ok.status == "ok" and ok.detail == (
        f"16.0 GB available; the largest CPU training, smollm2 (peft/recipes/smollm2.yaml, max_length 4608, "
        f"gradient checkpointing on), peaks at {peak:.1f} GB (measured)")
    [short] = doctor.check_training_memory(demo, free_ram=lambda: 1.0)
    assert short.status == "warn" and short.detail.endswith(f": {peak - 1.0:.1f} GB short (it swaps or is killed)")
    mini = load_study(["config/mini-study.yaml"])
    assert doctor.check_training_memory(mini, free_ram=lambda: 16.0)[0].status == "ok"
    assert doctor.check_training_memory(load_study(["config/config.yaml"])) == []   # CUDA students: the merge's


def test_a_recipe_never_measured_says_so(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    recipe = tmp_path / "long.yaml"
    recipe.write_text((REPO / "peft/recipes/smollm2.yaml").read_text().replace("max_length: 4608", "max_length: 8192"))
    study = load_study(["config/demo.yaml"])
    study.students["smollm2"].recipe = str(recipe)
    [line] = doctor.check_training_memory(study, free_ram=lambda: 16.0)
    assert line.detail == f"16.0 GB available; CPU training peak not measured for smollm2 ({recipe})"

"""No silent CPU training: a cuda_training recipe without a CUDA device stops in one line, before the base loads.

This machine has no GPU; ``torch.cuda.is_available`` is patched only where a test needs
to say which way it answers, so the refusal, its wording and the override run the real
code path of ``metrobench train``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.errors import MetrobenchError

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_cuda(monkeypatch):
    """torch sees no CUDA device (as with a driver older than its CUDA needs), built for CUDA 13.0."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.delenv("METROBENCH_ALLOW_CPU_TRAINING", raising=False)


@pytest.fixture
def loads(monkeypatch):
    """Record whether training went past the check: the first thing after it reads the training set."""
    import metrobench.training.train as training

    reached = []

    def load_examples(path):
        reached.append(path)
        raise MetrobenchError(f"{path}: stop here (test)")

    monkeypatch.setattr(training, "load_examples", load_examples)
    return reached


def train_args(recipe: str, tmp_path: Path) -> list[str]:
    return ["train", "--recipe", str(REPO / "peft" / "recipes" / recipe), "--dataset", str(tmp_path / "d.jsonl"),
            "--seed", "42", "--out", str(tmp_path / "adapter")]


@pytest.mark.parametrize("recipe", ["2b.yaml", "27b-corrected.yaml"])
def test_a_gpu_recipe_without_cuda_is_one_line_naming_torch_s_cuda_and_the_driver(no_cuda, loads, tmp_path,
                                                                                  capsys, recipe):
    assert main(train_args(recipe, tmp_path)) == 2
    err = capsys.readouterr().err
    size = recipe.split("-")[0].removesuffix(".yaml")
    assert err == (f"metrobench: error: recipe {size} trains on CUDA (cuda_training: true), but torch sees no CUDA "
                   f"device: torch {torch.__version__} is built for CUDA 13.0, which needs an NVIDIA driver "
                   ">= 580.65.06 on Linux (nvidia-smi shows the installed driver; CUDA_VISIBLE_DEVICES must not "
                   "hide the card); or train on the CPU anyway with `metrobench train --allow-cpu`\n")
    assert loads == [] and not (tmp_path / "adapter").exists()      # stopped before anything was read or loaded


def test_a_cpu_only_torch_is_named_as_such(no_cuda, monkeypatch):
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import require_cuda

    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(MetrobenchError, match=r"^recipe 4b trains on CUDA .*: torch \S+ is a CPU-only build "
                                              r"\(torch.version.cuda is None\): install a CUDA build of torch; "):
        require_cuda(load_recipe(REPO / "peft" / "recipes" / "4b.yaml"))


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_allow_cpu_trains_a_gpu_recipe_on_the_cpu(no_cuda, loads, tmp_path, monkeypatch, capsys, how):
    """The rehearsal's override (its jobs' environment) and the flag: training goes on past the check."""
    args = train_args("9b.yaml", tmp_path)
    if how == "flag":
        args.append("--allow-cpu")
    else:
        monkeypatch.setenv("METROBENCH_ALLOW_CPU_TRAINING", "1")
    assert main(args) == 2
    assert capsys.readouterr().err == f"metrobench: error: {tmp_path / 'd.jsonl'}: stop here (test)\n"
    assert loads == [tmp_path / "d.jsonl"]


def test_the_rehearsal_s_jobs_allow_cpu_training(tmp_path):
    from metrobench.commands.training import ALLOW_CPU_ENV
    from metrobench.rehearsal import environment

    assert environment(tmp_path, "http://127.0.0.1:1")[ALLOW_CPU_ENV] == "1"


def test_cpu_recipes_and_cuda_machines_pass_the_check(no_cuda, monkeypatch):
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import require_cuda

    for name in ("tiny-qwen3_5.yaml", "smollm2.yaml", "smollm2-mini.yaml"):
        require_cuda(load_recipe(REPO / "peft" / "recipes" / name))     # cuda_training: false
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    require_cuda(load_recipe(REPO / "peft" / "recipes" / "27b.yaml"))


@pytest.mark.parametrize("cuda, driver", [("13.0", ">= 580.65.06"), ("12.8", ">= 570.26"), ("12.6", ">= 560.28.03"),
                                          ("13.2", ">= 580"), ("12.9", ">= 525"), ("14.0", "that supports it")])
def test_the_driver_each_cuda_needs(cuda, driver):
    from metrobench.training.train import driver_needed

    assert driver_needed(cuda) == driver


def test_the_table_knows_the_installed_torch_s_cuda():
    """The driver line names a version for the torch installed here (a CUDA build on the workstation)."""
    from metrobench.training.train import driver_needed

    assert torch.version.cuda is None or driver_needed(torch.version.cuda) != "that supports it"

"""A recipe whose warmup leaves no step at its learning rate is refused (every committed recipe loads: test_templates)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from metrobench.errors import MetrobenchError
from metrobench.training.recipe import load_recipe


@pytest.mark.parametrize("steps, ratio, refused", [(1, 0.05, True), (1, None, True), (2, 0.6, True),
                                                   (1, 0.0, False), (2, 0.05, False), (-1, 0.05, False)])
def test_a_warmup_taking_every_step_is_one_line(tmp_path, steps, ratio, refused):
    path = tmp_path / "r.yaml"
    warmup = f"warmup_ratio: {ratio}\n" if ratio is not None else ""
    path.write_text(f"size: x\nbase: tiny-qwen3\nmax_steps: {steps}\n{warmup}")
    if not refused:
        assert load_recipe(path).max_steps == steps
        return
    with pytest.raises(MetrobenchError, match=r"r.yaml: field warmup_ratio: .*a warmup of (1 of 1|2 of 2) steps"):
        load_recipe(path)


def test_transformers_warms_up_from_a_rate_of_zero():
    """Why the check exists: the scheduler's first step is at rate 0 while warming up,
    so a one-step run with the default warmup trains nothing (the CPU demo's students did)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    param = torch.nn.Parameter(torch.zeros(1))
    for steps, ratio in ((1, 0.05), (2, 0.05), (1, 0.0)):
        optimizer = torch.optim.AdamW([param], lr=1e-3)
        schedule = transformers.get_scheduler("cosine", optimizer, num_warmup_steps=math.ceil(ratio * steps),
                                              num_training_steps=steps)
        rates = []
        for _ in range(steps):
            rates.append(schedule.get_last_lr()[0])
            optimizer.step()
            schedule.step()
        assert (rates[0] == 0.0) == (ratio > 0), (steps, ratio, rates)
        assert any(rate > 0 for rate in rates) == (math.ceil(ratio * steps) < steps)


REPO = Path(__file__).resolve().parents[1]
GPU_RECIPES = [f"{size}{variant}.yaml" for size in ("2b", "4b", "9b", "27b") for variant in ("", "-corrected")]


def test_lora_dtype_is_fp32_unless_a_recipe_says_bf16_and_anything_else_is_one_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("size: x\nbase: tiny-qwen3\n")
    assert load_recipe(path).lora_dtype == "float32"          # the paper's adapters (Table 8)
    path.write_text("size: x\nbase: tiny-qwen3\nlora_dtype: bfloat16\n")
    assert load_recipe(path).lora_dtype == "bfloat16"
    path.write_text("size: x\nbase: tiny-qwen3\nlora_dtype: float8\n")
    with pytest.raises(MetrobenchError) as caught:
        load_recipe(path)
    assert str(caught.value) == f"{path}: field lora_dtype: Input should be 'float32' or 'bfloat16'"


def test_the_gpu_recipes_say_fp32_and_cuda_and_the_cpu_recipes_train_anywhere():
    """The paper sizes and their corrected variants state both keys; tiny and SmolLM2 take the defaults."""
    for name in GPU_RECIPES:
        recipe = load_recipe(REPO / "peft" / "recipes" / name)
        assert (recipe.lora_dtype, recipe.cuda_training) == ("float32", True), name
    for name in ("tiny.yaml", "tiny-qwen3_5.yaml", "smollm2.yaml", "smollm2-mini.yaml"):
        assert not load_recipe(REPO / "peft" / "recipes" / name).cuda_training, name

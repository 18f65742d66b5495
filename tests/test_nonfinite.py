"""What counts as a diverged training or a model that does not compute (issue 49, item 4), without torch.

The slow tests in test_training.py run the real thing: a training at a learning rate of 1e12
through `metrobench train`, and the load check on GGUFs with NaN and zeroed weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrobench.errors import MetrobenchError
from metrobench.training.export import served_problem
from metrobench.training.loadcheck import logit_problem
from metrobench.training.recipe import Recipe
from metrobench.training.train import check_finite

RECIPE = Recipe(size="4b", base="Qwen/Qwen3.5-4B", learning_rate=2e-4)


@pytest.mark.parametrize("logs, step, message", [
    ({"loss": 2.1, "grad_norm": float("nan")}, 3, "the gradient norm is nan at step 3"),
    ({"loss": float("inf"), "grad_norm": 0.5}, 7, "the training loss is inf at step 7"),
    ({"eval_loss": float("nan")}, 50, "the validation loss is nan after step 50"),
    ({"loss": "nan"}, 2, "the training loss is nan at step 2"),       # a log value as text is read as one
])
def test_a_non_finite_log_value_stops_training_in_one_line(logs, step, message):
    with pytest.raises(MetrobenchError) as caught:
        check_finite(logs, step, RECIPE, 43)
    assert str(caught.value) == (f"recipe 4b, seed 43: {message} (learning_rate 0.0002); training stopped and no "
                                 "adapter was written: lower the learning rate (or find what else diverged) and "
                                 "train again")


def test_finite_and_absent_values_and_other_keys_pass():
    check_finite({"loss": 10.8, "grad_norm": 0.47, "learning_rate": 0.0, "epoch": 1.0}, 1, RECIPE, 42)
    check_finite({"eval_loss": None, "train_runtime": 10.1, "entropy": float("nan")}, 4, RECIPE, 42)  # not watched
    check_finite({}, 0, RECIPE, 42)


def test_logits_that_are_not_numbers_or_say_nothing_are_named():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=49152).astype(np.float32)
    assert logit_problem(logits) is None
    nan = logits.copy()
    nan[:3] = np.nan
    assert logit_problem(nan) == "3 NaN of its 49152 logits"
    both = nan.copy()
    both[5] = np.inf
    assert logit_problem(both) == "3 NaN and 1 infinite of its 49152 logits"
    assert logit_problem(np.full(49152, -np.inf, dtype=np.float32)) == "49152 infinite of its 49152 logits"
    assert logit_problem(np.zeros(49152, dtype=np.float32)) == "all 49152 logits equal (0)"
    near = np.zeros(49152, dtype=np.float32)
    near[17] = 1e-3                                   # one logit apart is a distribution, however weak
    assert logit_problem(near) is None


def _position(logprob):
    return {"id": 30, "token": ".", "logprob": logprob, "top_logprobs": [{"id": 30, "token": ".", "logprob": logprob}]}


def test_served_probabilities_of_a_nan_or_flat_model_are_refused():
    """llama-server writes a NaN log-probability as null; a uniform distribution's top one is -log(n_vocab)."""
    vocab = 49152
    sane = [_position(-9.858), _position(-9.850)]
    assert served_problem(sane, vocab) is None
    assert served_problem([_position(-9.858), _position(None)], vocab) == {
        "token": 2, "what": "the chosen token's log-probability is None (NaN or infinite logits)"}
    flat = -math.log(vocab) + 2e-7                    # float32's rounding of it (a zeroed model's reply)
    assert served_problem([_position(flat)], vocab) == {
        "token": 1, "what": f"all {vocab} logits equal (top probability 1/{vocab})"}
    assert served_problem([_position(flat)], None) is None       # no n_vocab from the server: not judged
    assert served_problem([{"id": 3, "token": "a"}], vocab) is None   # no log-probability given: not judged
    assert served_problem([], vocab) is None

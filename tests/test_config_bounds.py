"""Config values that would take the machine (issue 41, class 4): each is one error line naming the
file and field, before anything is planned or allocated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metrobench.errors import MetrobenchError
from metrobench.scoring.names import check_name

REPO = Path(__file__).resolve().parents[1]


def check_config(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "metrobench.study", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    return done.returncode, done.stderr.splitlines()


@pytest.mark.parametrize(("text", "field", "says"), [
    ("results: /\n", "results", "'/' is the filesystem root"),
    ("results: /tmp/..\n", "results", "is the filesystem root"),
    ("results: '~'\n", "results", "is your home folder"),
    ("models:\n  m: {provider: llama_cpp, repeats: 100000}\n", "models.m.repeats", "less than or equal to 100"),
    ("models:\n  m: {provider: llama_cpp, repeats: 1000000000}\n", "models.m.repeats", "less than or equal to 100"),
    ("stats: {n_resamples: 1000000000}\n", "stats.n_resamples", "less than or equal to 1000000"),
    ("stats: {seed: -1}\n", "stats.seed", "greater than or equal to 0"),
    ("stats: {seed: 99999999999}\n", "stats.seed", "less than or equal to 4294967295"),
])
def test_a_value_that_would_take_the_machine_is_one_line(tmp_path, text, field, says):
    code, err = check_config(tmp_path, text)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"metrobench: error: {tmp_path / 'study.yaml'}: field {field}: ") and says in err[0]


def test_nested_yaml_aliases_are_refused_before_they_expand(tmp_path):
    # nine aliases of nine, eight levels down: 9^8 = 43 million values from a few hundred bytes
    lines = ["x-a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"x-a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    lines += ["models:", "  m: {provider: llama_cpp, extra_body: {bomb: *a8}}"]
    code, err = check_config(tmp_path, "\n".join(lines) + "\n")
    assert code == 2 and err == [f"metrobench: error: {tmp_path / 'study.yaml'}: more than 1,000,000 values once "
                                 "its YAML aliases (*name) are expanded: not a config (a nest of aliases?)"]


def test_a_name_ending_in_a_newline_cannot_name_a_folder():
    assert check_name("model", "qwen3.5-27b") == "qwen3.5-27b"
    for bad in ("qwen\n", "qwen\r", "a/b", "", "\nqwen"):
        with pytest.raises(MetrobenchError, match="cannot name a folder"):
            check_name("model", bad)


@pytest.mark.parametrize(("model", "says"), [
    ("4b-peft-s42", "model 4b-peft-s42 has the name of the student 4b-peft-s42 (students.4b, seed 42): "
                    "rename the model"),
    ("4b-peft", "model 4b-peft has the name of the student group 4b-peft (the seeds of students.4b): "
                "rename the model"),
])
def test_a_model_named_like_a_student_is_one_line(tmp_path, model, says):
    # issue 41, class 2: the workflow served the student in the configured model's place, silently
    code, err = check_config(tmp_path, f"models:\n  {model}: {{provider: llama_cpp}}\n"
                                       "students:\n  4b: {base_model: m, recipe: peft/recipes/4b.yaml, seeds: [42]}\n")
    assert code == 2 and err == [f"metrobench: error: {tmp_path / 'study.yaml'}: field models.{model}: {says}"]
    # a seed the config does not train, or another size, is a model name like any other
    other = "4b-peft-s43" if model.endswith("42") else "2b-peft"
    code, err = check_config(tmp_path, f"models:\n  {other}: {{provider: llama_cpp}}\n"
                                       "students:\n  4b: {base_model: m, recipe: peft/recipes/4b.yaml, seeds: [42]}\n")
    assert code == 0, err

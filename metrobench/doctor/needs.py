"""What a study asks of this machine (:class:`StudyNeeds`, read by :func:`read_needs` from the
study config, its model configs and recipes) and one line of ``metrobench doctor``'s report
(:class:`Check`: ``ok``, ``warn`` or ``FAIL``). Every other doctor module takes these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.footprint.disk import billions

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


@dataclass
class Check:
    status: str            # "ok", "warn" or "FAIL"
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<18} {self.detail}"


@dataclass
class StudyNeeds:
    """What the configured study asks of this machine."""

    local_models: list[str] = field(default_factory=list)     # served here by llama.cpp
    ggufs: dict[str, str] = field(default_factory=dict)       # model -> GGUF path (files to exist)
    key_envs: dict[str, str] = field(default_factory=dict)    # env var -> who needs it
    students: bool = False
    gpu_training: bool = False      # a student's base is a hub model (billions of parameters)
    data_path: str | None = None
    student_billions: dict[str, float] = field(default_factory=dict)   # student -> parameters (1e9)
    student_seeds: dict[str, int] = field(default_factory=dict)        # student -> seeds trained
    student_bases: dict[str, str] = field(default_factory=dict)        # student -> recipe base
    peft_temporary: bool = False    # merged folders and f16 GGUFs deleted once quantised


def read_needs(study: StudyConfig) -> StudyNeeds:
    """Read the study config for what it will run (model configs and recipes in files too)."""
    from metrobench.agents.runner.config import resolve_model_config
    from metrobench.training.recipe import load_recipe

    needs = StudyNeeds(data_path=study.data.path)
    for name, entry in study.models.items():
        cfg = resolve_model_config(entry, name)
        if cfg.api_key_env:
            needs.key_envs.setdefault(cfg.api_key_env, f"model {name}")
        if cfg.serving is not None:
            needs.local_models.append(name)
            if cfg.serving.gguf:
                needs.ggufs[name] = cfg.serving.gguf
    judge = study.scoring.judge
    if judge == "anthropic" or (judge == "openai" and study.scoring.judge_key_env):  # a name, checked
        needs.key_envs.setdefault(study.scoring.judge_key_env or "ANTHROPIC_API_KEY", "the judge")
    students = study.students
    needs.students = bool(students)
    needs.peft_temporary = study.peft_temporary
    for name, student in students.items():
        base = load_recipe(student.recipe).base
        needs.student_billions[name] = billions(name)
        needs.student_seeds[name] = len(student.seeds)
        needs.student_bases[name] = base
        needs.gpu_training |= "/" in base and not base.startswith(("pypi:", ".", "/")) \
            and not Path(base).exists()
    if students:
        needs.local_models.append("students")
    return needs

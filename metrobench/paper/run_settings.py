"""One model, one set of settings: a table refuses a model whose runs disagree on what they ran with.

Every transcript record carries the decoding and loop settings it was run with
(``meta.settings``: :meth:`~metrobench.agents.runner.config.ModelConfig.settings`), its
settings fingerprint (``meta.config``) and its serving record (``meta.serving``). A
model's systems are run by separate jobs, so an edited setting with a system's run
left stale (an interrupted rerun, a run copied in from elsewhere) would put two
configurations in one row. :func:`disagreement` finds the first difference between
a model's systems and says it in one line naming the model, both systems and the
field (``max_tokens 512 on marta, 256 on doha``); the tables raise it as their
``metrobench: error:``. Records made before settings were recorded are compared
as they are (all unrecorded agree); a model with no runs on disk is not checked
(its scores may come from elsewhere).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metrobench.agents.serving_record import build_label
from metrobench.errors import MetrobenchError
from metrobench.transcripts.records import CaseRecord, read_run
from metrobench.transcripts.system_files import system_transcripts


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _identity(record: CaseRecord) -> dict[str, Any]:
    """What a record ran with, field by field: its settings, its server build, then its fingerprint
    (which also covers the prompt, tool parser, GGUF file and context per request)."""
    settings = record.meta.get("settings")
    fields: dict[str, Any] = dict(settings) if isinstance(settings, dict) else {"settings": "unrecorded"}
    build = (record.meta.get("serving") or {}).get("build")
    if build:
        fields["server build"] = build_label(build)
    fields["settings fingerprint"] = record.meta.get("config")
    return fields


def disagreement(model: str, runs: list[tuple[str, list[CaseRecord]]]) -> str | None:
    """The first field on which a model's runs differ, in one line; ``runs``: (system, records) pairs."""
    first: tuple[str, dict[str, Any]] | None = None
    for system, records in runs:
        for record in records:
            now = _identity(record)
            if first is None:
                first = (system, now)
                continue
            where, then = first
            for key in [*then, *(k for k in now if k not in then)]:
                if then.get(key) != now.get(key):
                    place = f"on {where}, {_shown(now.get(key))} on {system}" if where != system else \
                        f"and {_shown(now.get(key))} within {system}"
                    return (f"model {model}: its runs disagree on their settings: {key} {_shown(then.get(key))} "
                            f"{place}; rerun the model's runs under one config (the workflow reruns a "
                            f"changed model's runs; `metrobench bench --set-aside` keeps the old ones)")
    return None


def model_runs(runs_root: Path, model: str) -> list[tuple[str, list[CaseRecord]]]:
    """(system, records) of each of a model's system transcripts under a view's runs folder, systems in
    name order; set-asides beside them (``<system>.<fingerprint>.jsonl``) are not systems."""
    return [(system, read_run(path).records) for system, path in system_transcripts(Path(runs_root) / model)]


def check_models(runs_root: Path, models: Iterable[str]) -> None:
    """Raise the first disagreement among these models' runs under a view's runs folder."""
    for model in models:
        problem = disagreement(model, model_runs(runs_root, model))
        if problem:
            raise MetrobenchError(problem)

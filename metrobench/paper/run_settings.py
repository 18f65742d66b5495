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

The serving record is compared field by field as a resume compares it within one transcript
(:data:`~metrobench.agents.serving_record.COMPARED`, :func:`~metrobench.agents.serving_record.differences`):
the GGUF file's SHA-256 (one name, re-downloaded or re-quantised, is two files), the chat
template, context per slot, slots, flash attention, layers on the GPU, a hosted model's dialect,
deployment and API version; a field one record lacks (made before it was recorded) is not compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metrobench.agents.serving_record import COMPARED, build_label
from metrobench.errors import MetrobenchError
from metrobench.transcripts.records import CaseRecord, read_run
from metrobench.transcripts.system_files import system_transcripts


#: The serving record's fields compared across systems, by the words that name them (the build is
#: compared by its label, as before); a record lacking one is not compared on it.
_SERVING = {words: key for key, words in COMPARED.items() if key != "build"}


def _shown(value: Any, field: str = "") -> str:
    if value is None:
        return "unset"
    if field in _SERVING:
        return str(value)[:16]     # a digest's first 16 characters, as a resume's refusal shows it
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _identity(record: CaseRecord) -> dict[str, Any]:
    """What a record ran with, field by field: its settings, its server build, its serving record's
    other compared fields, then its fingerprint (which also covers the prompt, tool parser, GGUF
    file name and context per request, not the file's content)."""
    settings = record.meta.get("settings")
    fields: dict[str, Any] = dict(settings) if isinstance(settings, dict) else {"settings": "unrecorded"}
    serving = record.meta.get("serving")
    serving = serving if isinstance(serving, dict) else {}
    if serving.get("build"):
        fields["server build"] = build_label(serving["build"])
    for words, key in _SERVING.items():
        if key in serving:
            fields[words] = serving[key]
    fields["settings fingerprint"] = record.meta.get("config")
    return fields


def disagreement(model: str, runs: list[tuple[str, list[CaseRecord]]]) -> str | None:
    """The first field on which a model's runs differ, in one line; ``runs``: (system, records) pairs.

    Settings and fingerprint are compared with the first record's; a serving field with the first
    record that recorded it (an older record without it is not compared on it, as on resume)."""
    first: tuple[str, dict[str, Any]] | None = None
    seen: dict[str, tuple[str, Any]] = {}       # serving field -> (system, value) first recorded
    for system, records in runs:
        for record in records:
            now = _identity(record)
            if first is None:
                first = (system, now)
            where, then = first
            for key in [*then, *(k for k in now if k not in then)]:
                if key in _SERVING:
                    if key not in now:
                        continue
                    at, value = seen.setdefault(key, (system, now[key]))
                else:
                    at, value = where, then.get(key)
                if value != now.get(key):
                    place = f"on {at}, {_shown(now.get(key), key)} on {system}" if at != system else \
                        f"and {_shown(now.get(key), key)} within {system}"
                    return (f"model {model}: its runs disagree on their settings: {key} {_shown(value, key)} "
                            f"{place}; rerun the model's runs under one config (the workflow reruns a "
                            f"changed model's runs; `metrobench bench --set-aside` keeps the old ones)")
    return None


def model_runs(runs_root: Path, model: str) -> list[tuple[str, list[CaseRecord]]]:
    """(system, records) of each of a model's system transcripts under a view's runs folder, systems in
    name order; set-asides beside them (``<system>.<fingerprint>.jsonl``) are not systems."""
    return [(system, read_run(path).records) for system, path in system_transcripts(Path(runs_root) / model)]


def check_runs_agree(runs_root: Path, models: Iterable[str]) -> None:
    """Raise the first disagreement among these models' runs under a view's runs folder."""
    for model in models:
        problem = disagreement(model, model_runs(runs_root, model))
        if problem:
            raise MetrobenchError(problem)

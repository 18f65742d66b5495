"""Reading a study config: files merged in order, validated against the schema, then the checks that span
sections (models against students, repeats, contexts, targets), each failure one line naming the file and field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from metrobench import layout
from metrobench.agents.runner.config import ModelConfig
from metrobench.errors import DataError, MetrobenchError
from metrobench.study.schema import StudyConfig


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``: later values win, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) \
            else value
    return out


def _source(sources: list[tuple[str, Any]], loc: tuple[Any, ...]) -> str:
    """The source that set the value at ``loc``, following :func:`merge`: mappings merge, so
    the deepest key decides; a list or a scalar replaces, so its source owns all below it.
    All the sources' names when none has even the first key (a field missing everywhere)."""
    live, owner = list(sources), None
    for part in loc:
        having = [(name, node[part]) for name, node in live if isinstance(node, Mapping) and part in node]
        if not having:
            break
        owner, value = having[-1]
        if not isinstance(value, Mapping):
            break
        last_plain = max((i for i, (_, v) in enumerate(having) if not isinstance(v, Mapping)), default=-1)
        live = having[last_plain + 1:]
    return owner or ", ".join(name for name, _ in sources) or "study config"


def _raise(sources: list[tuple[str, Any]], exc: ValidationError, prefix: tuple[Any, ...] = ()) -> NoReturn:
    """One DataError for a validation failure: the file that set the field, the field, the message."""
    from metrobench.data.loader import _first_error, _loc

    loc = prefix + tuple(exc.errors(include_url=False)[0]["loc"])
    _, msg = _first_error(exc)
    raise DataError(_source(sources, loc), msg, field=_loc(loc)) from None


def _check_models(study: StudyConfig, sources: list[tuple[str, Any]]) -> None:
    """Inline model settings through the runner's ModelConfig, as the runner will read them."""
    inline = {name: entry for name, entry in study.models.items() if isinstance(entry, dict)}
    checks = [(("models", name), {"name": name, **entry}) for name, entry in inline.items()]
    if study.student_serving is not None:
        checks.append((("student_serving",), {"name": "student", **study.student_serving}))
    for loc, raw in checks:
        try:
            ModelConfig.model_validate(raw)
        except ValidationError as exc:
            _raise(sources, exc, loc)


def _check_repeats(study: StudyConfig, sources: list[tuple[str, Any]]) -> None:
    """Every repeat's name is free (no configured or student model has it); students repeat by seed."""
    serving = study.student_serving or {}
    if serving.get("repeats", 1) != 1:
        raise DataError(_source(sources, ("student_serving", "repeats")), "students repeat by seed "
                        "(students.<size>.seeds), not by student_serving.repeats", field="student_serving.repeats")
    taken = set(study.models) | set(layout.student_models(study.seeds()))
    for model, k in study.repeats.items():
        clash = next((n for n in study.members([model])[1:] if n in taken), None)
        if clash:
            where = ("models", model, "repeats")
            raise DataError(_source(sources, where), f"repeat {clash} of {model} has the name of another "
                            "model: rename one of them", field=".".join(where))


def _check_students(study: StudyConfig, sources: list[tuple[str, Any]]) -> None:
    """No configured model has a student's name (``<size>-peft-s<seed>``) or a student group's
    (``<size>-peft``): the workflow would serve the student in its place, and a table naming the
    group would average the students, without a word."""
    seeds = study.seeds()
    groups = {f"{size}{layout.GROUP_SUFFIX}": size for size in seeds}
    for model in study.models:
        student = layout.student_of(seeds, model)
        if student is None and model not in groups:
            continue
        what = (f"student {model} (students.{student[0]}, seed {student[1]})" if student else
                f"student group {model} (the seeds of students.{groups[model]})")
        where = ("models", model)
        raise DataError(_source(sources, where), f"model {model} has the name of the {what}: rename the model",
                        field=".".join(where))


#: llama.cpp pads each slot's share of n_ctx to this many tokens (src/llama-context.cpp): a
#: share that is not a multiple would be silently resized, so the served context would differ
#: from the configured one (and from the run's fingerprint).
CTX_MULTIPLE = 256


def context_problem(n_ctx: int, parallel: int) -> str | None:
    """Why llama-server would not serve exactly ``n_ctx`` tokens over ``parallel`` slots, else None."""
    slots = max(1, parallel)
    if n_ctx <= 0:
        return f"n_ctx {n_ctx}: must be positive"
    if n_ctx % (CTX_MULTIPLE * slots):
        return (f"n_ctx {n_ctx}: llama-server serves a multiple of {CTX_MULTIPLE} tokens a slot, so it must be a "
                f"multiple of {CTX_MULTIPLE * slots} with {slots} slot(s) (parallel); "
                f"{max(1, n_ctx // (CTX_MULTIPLE * slots)) * CTX_MULTIPLE * slots} would do")
    return None


def _check_contexts(study: StudyConfig, sources: list[tuple[str, Any]]) -> None:
    """Every llama-server row's n_ctx is one the server serves as configured (:func:`context_problem`)."""
    from metrobench.agents.runner.config import resolve_model_config

    entries = [(("models", name), name, entry) for name, entry in study.models.items()
               if isinstance(entry, dict) or Path(entry).is_file()]
    if study.student_serving is not None:
        entries.append((("student_serving",), "student", study.student_serving))
    for loc, name, entry in entries:
        serving = resolve_model_config(entry, name).serving
        if serving is None or serving.server != "llama-server":
            continue
        problem = context_problem(serving.n_ctx, serving.parallel)
        if problem:
            where = (*loc, "serving", "n_ctx")
            source = _source(sources, where) if isinstance(entry, dict) else str(entry)
            raise DataError(source, problem, field=".".join(where))


def _check_targets(study: StudyConfig, sources: list[tuple[str, Any]]) -> None:
    """Report targets are named inside the results folder: ``table2.csv``, not ``results/table2.csv``."""
    root = study.results.rstrip("/") + "/"
    for i, target in enumerate(study.report.targets or []):
        if target.startswith(root) or Path(target).is_absolute():
            where = ("report", "targets", i)
            raise DataError(_source(sources, where), f"{target}: name it inside the results folder "
                            f"({target.removeprefix(root)}), which is {study.results}", field="report.targets")


def validate_study(raw: Any, sources: list[tuple[str, Any]] | None = None) -> StudyConfig:
    """A merged config mapping as a StudyConfig; ``sources`` (name, raw mapping) name the culprit file."""
    sources = sources if sources is not None else [("study config", raw)]
    if not isinstance(raw, Mapping):
        raise MetrobenchError(f"{_source(sources, ())}: expected a mapping of config keys")
    try:
        study = StudyConfig.model_validate(raw)
    except ValidationError as exc:
        _raise(sources, exc)
    _check_models(study, sources)
    _check_students(study, sources)
    _check_repeats(study, sources)
    _check_targets(study, sources)
    _check_contexts(study, sources)
    return study


def read_sources(paths: list[str] | list[Path] | None) -> list[tuple[str, dict[str, Any]]]:
    """Each config file as (name, mapping), in order; a missing file or a non-mapping is an error."""
    from metrobench.data.loader import CONFIG_MAX_VALUES, read_yaml

    sources: list[tuple[str, dict[str, Any]]] = []
    for path in paths or []:
        if not Path(path).is_file():
            raise MetrobenchError(f"{path}: no such config file")
        raw = read_yaml(Path(path), CONFIG_MAX_VALUES)
        if raw is not None and not isinstance(raw, Mapping):
            raise MetrobenchError(f"{path}: expected a mapping of config keys, got {type(raw).__name__}")
        sources.append((str(path), raw or {}))
    return sources


def merge_sources(sources: list[tuple[str, Any]]) -> dict[str, Any]:
    """The sources merged in order with :func:`merge` (unvalidated)."""
    merged: dict[str, Any] = {}
    for _, raw in sources:
        merged = merge(merged, raw)
    return merged


def load_study(paths: list[str] | list[Path] | None, overrides: Mapping[str, Any] | None = None) -> StudyConfig:
    """Config files merged in order, then ``overrides`` (e.g. parsed ``--config`` values), validated."""
    sources: list[tuple[str, Any]] = list(read_sources(paths))
    if overrides:
        sources.append(("config overrides", dict(overrides)))
    return validate_study(merge_sources(sources), sources)

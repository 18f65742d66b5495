"""Tables 5 and 6: how each row was served, read from what its runs recorded, not from the config.

Every transcript record carries the decoding settings it was run with
(``meta.settings``: :meth:`~metrobench.agents.runner.config.ModelConfig.settings`)
and its serving record (``meta.serving``: :mod:`metrobench.agents.serving_record`).
Table 6 is one row per model — temperature, sampling, thinking, reasoning
effort, output budget, rounds, server build, the loop's protocol — over the leaderboard's and the
sensitivity table's models; Table 5 groups those rows by the leaderboard's
``family`` and shows, per setting, the values its members ran with (one value
when they agree, all of them when they differ, as the paper lists GPT-5.4's
three efforts). A model whose records disagree on a setting cannot be one row:
that is reported, not averaged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from metrobench.agents.serving_record import build_label
from metrobench.errors import MetrobenchError
from metrobench.paper.run_settings import disagreement, model_runs

if TYPE_CHECKING:
    from metrobench.paper.inputs import Cell, Row

COLUMNS = ("model", "family", "provider", "temperature", "sampling", "thinking", "reasoning_effort",
           "output_tokens", "rounds", "template_kwargs", "server_build", "protocol")


def _sampling(settings: dict[str, Any]) -> str:
    """Greedy, or the sampling parameters as the paper writes them."""
    if not settings.get("temperature"):
        return "greedy"
    parts = [f"temperature {settings['temperature']:g}"]
    for key, words in (("top_p", "top-p"), ("top_k", "top-k"), ("min_p", "min-p"), ("seed", "seed")):
        if settings.get(key) is not None:
            parts.append(f"{words} {settings[key]:g}")
    return ", ".join(parts)


def _protocol(settings: dict[str, Any]) -> str:
    """The loop's protocol (:mod:`metrobench.agents.runner.protocol`): ``paper``, or its options;
    empty where the settings hold none (the scripted baseline, records from before the setting)."""
    from metrobench.agents.runner.protocol import Protocol

    recorded = settings.get("protocol")
    if not isinstance(recorded, dict):
        return ""
    options = Protocol.model_validate(recorded).options()
    return ", ".join(options) or "paper"


def _thinking(value: bool | None) -> str:
    return "" if value is None else ("on" if value else "off")


def recorded_row(model: str, family: str, runs: list[tuple[str, list]]) -> dict[str, Any]:
    """One model's serving as its records hold it ((system, records) pairs); an error when they
    disagree (naming the systems and the field: :func:`~metrobench.paper.run_settings.disagreement`)
    or hold none."""
    records = [r for _, rs in runs for r in rs]
    settings = [r.meta.get("settings") for r in records]
    builds = {build_label((r.meta.get("serving") or {}).get("build")) for r in records
              if (r.meta.get("serving") or {}).get("build")}
    if not records:
        raise MetrobenchError(f"model {model}: no runs recorded")
    if any(s is None for s in settings):
        raise MetrobenchError(f"model {model}: runs made before settings were recorded (rerun them to report "
                              f"Tables 5 and 6)")
    problem = disagreement(model, runs)
    if problem:
        raise MetrobenchError(problem)
    first = settings[0]
    return {"model": model, "family": family, "provider": first["provider"],
            "temperature": first.get("temperature"), "sampling": _sampling(first),
            "thinking": _thinking(first.get("thinking")), "reasoning_effort": first.get("reasoning_effort") or "",
            "output_tokens": first["max_tokens"], "rounds": first["max_rounds"],
            "template_kwargs": ", ".join(f"{k}: {v}" for k, v in sorted(
                (first.get("chat_template_kwargs") or {}).items())),
            "server_build": builds.pop() if builds else "", "protocol": _protocol(first)}


def _rows(leaderboard: Sequence[Row], cells: Sequence[Cell]) -> list[tuple[str, str, str]]:
    """(label, family, model whose runs stand for the row) for Table 6, in the paper's order: the
    leaderboard's rows that are no reference line (a group: its first seed), then Table 3's models."""
    rows, seen = [], set()
    for row in leaderboard:
        if row.reference:
            continue
        first = row.model.seeds[0]
        rows.append((row.shown, row.family, first))
        seen.add(first)
    rows += [(c.model, "", c.model) for c in cells if c.model not in seen]
    return rows


def table6(leaderboard: Sequence[Row], cells: Sequence[Cell], runs: Path) -> pd.DataFrame:
    """Per-model serving, from each row's recorded runs under ``runs`` (``<runs>/<model>/<system>.jsonl``)."""
    from metrobench.paper.tables import Skip

    out, missing = [], []
    for label, family, model in _rows(leaderboard, cells):
        found = model_runs(runs, model)
        if not found:
            missing.append(model)
            continue
        out.append({**recorded_row(model, family, found), "model": label})
    if not out:
        raise Skip(f"table6: no runs for {', '.join(missing) or 'any model'}")
    return pd.DataFrame(out, columns=list(COLUMNS))


#: Reasoning efforts in the order the paper lists them (medium/high/xhigh).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _values(series: pd.Series) -> str:
    """The distinct values of a family's rows, joined (one when they agree); efforts in their order."""
    values = list(dict.fromkeys(str(v) for v in series if str(v) != ""))
    if values and all(v in EFFORTS for v in values):
        values.sort(key=EFFORTS.index)
    return "/".join(values)


def table5(leaderboard: Sequence[Row], cells: Sequence[Cell], runs: Path) -> pd.DataFrame:
    """Per-family serving: the values a family's rows (Table 6's) ran with (one when they agree)."""
    from metrobench.paper.tables import Skip

    frame = table6(leaderboard, cells, runs)
    frame = frame[frame["family"] != ""]
    if frame.empty:
        raise Skip("table5: no leaderboard row names its family")
    rows = []
    for family, group in frame.groupby("family", sort=False):
        rows.append({"family": family, "models": len(group), **{
            column: _values(group[column]) for column in COLUMNS[2:] if column != "family"}})
    return pd.DataFrame(rows)

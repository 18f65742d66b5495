"""The viewer's names for models: the study's leaderboard labels (Table 2's names).

Contract: :func:`leaderboard_labels` maps a model name to the label its leaderboard row gives
(``leaderboard[].label``); a student group's row (``<size>-peft``) labels each of its seeds'
models ``<size>-peft-s<seed>`` as ``<label> (seed <seed>)``, and a repeated model's further runs
``<model>-rep<i>`` as ``<label> (run <i>)``. A model without a labelled row is absent (the viewer
shows its name). Why: the index should name models as the tables do, so a reader can find
Table 2's rows in the viewer; the raw name stays beside the label, since it names the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from metrobench import layout

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def leaderboard_labels(config: StudyConfig) -> dict[str, str]:
    """Model name -> leaderboard label (module contract)."""
    seeds = config.seeds()
    labels: dict[str, str] = {}
    for row in config.leaderboard:
        if not row.label:
            continue
        size = row.model[: -len(layout.GROUP_SUFFIX)] if row.model.endswith(layout.GROUP_SUFFIX) else None
        if size is not None and size in seeds:
            labels.update({layout.student_name(size, seed): f"{row.label} (seed {seed})" for seed in seeds[size]})
            continue
        labels[row.model] = row.label
        for i in range(2, config.repeats.get(row.model, 1) + 1):
            labels[layout.repeat_name(row.model, i)] = f"{row.label} (run {i})"
    return labels

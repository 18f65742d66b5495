"""Which files in a model's runs folder are its systems' transcripts: ``<system>.jsonl`` of the
benchmark's systems, nothing else.

A runs folder holds more than a model's transcripts: ``--set-aside`` and ``--restart`` rename a
transcript made otherwise to ``<system>.<fingerprint>.jsonl`` beside it (kept, never deleted), and
people leave copies and notes. Read as systems, a set-aside doubles a model's cases in the
protocol table and makes Table 2's one-setting check refuse for ever (advising ``--set-aside``,
the step that made the file). So every reader of a model's transcripts (the protocol table,
the run-settings check, the viewer) lists them here, by the known systems' exact names.
"""

from __future__ import annotations

from pathlib import Path

from metrobench.data.root import SYSTEMS


def system_transcripts(folder: Path | str, suffix: str = ".jsonl") -> list[tuple[str, Path]]:
    """``(system, path)`` of each known system's ``<system><suffix>`` file in ``folder``, in system
    name order (the order messages name them in); set-asides and any other file are left out.
    ``suffix`` ``.json``: the reference harness's result files."""
    folder = Path(folder)
    return [(system, folder / f"{system}{suffix}") for system in sorted(SYSTEMS)
            if (folder / f"{system}{suffix}").is_file()]

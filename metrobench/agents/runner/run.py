"""A resumable run of one model over the cases of one system.

Each finished case is appended to the transcript and flushed at once, so a
killed run loses only the cases in flight. A rerun skips the cases already
recorded, except those that ended on an endpoint failure (429/5xx after all
retries, time-outs, a dead server): those are redone. Every record carries
the model-config fingerprint and its case's hash; a rerun under a different
configuration, against a changed case or for another system refuses to mix
them unless told to start over. The whole run, resume check included, holds
the transcript's lock (:func:`~metrobench.transcripts.records.transcript_lock`): a
second run on the same file refuses instead of doubling or losing cases.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from metrobench.data.loader import SystemData
from metrobench.data.root import SYSTEM_BY_PREFIX
from metrobench.data.models import Case
from metrobench.errors import MetrobenchError
from metrobench.agents.runner.client import ChatClient
from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.loop import run_case
from metrobench.transcripts.selection import Selection
from metrobench.transcripts.records import (CaseRecord, TranscriptWriter, iter_transcript, transcript_lock,
                                  write_transcript)


def case_hash(case: Case) -> str:
    return hashlib.sha256(json.dumps(case.raw, sort_keys=True).encode()).hexdigest()[:16]


def prepare_resume(path: Path, cfg: ModelConfig, cases: list[Case], *, restart: bool,
                   system: str | None = None) -> set[str]:
    """Ids already done in ``path``; drops retryable failures; refuses mismatched settings or system."""
    path = Path(path)
    if restart and path.exists():
        path.unlink()
    if not path.exists():
        return set()
    hashes = {c.id: case_hash(c) for c in cases}
    fingerprint = cfg.fingerprint()
    keep: list[CaseRecord] = []
    done: set[str] = set()
    redo = 0
    for record in iter_transcript(path):
        recorded = record.system or SYSTEM_BY_PREFIX.get(record.case_id.split("-")[0], "")
        if system is not None and recorded != system:
            raise MetrobenchError(
                f"{path}: case {record.case_id} is a {recorded or 'unknown system'} case, not {system}; "
                f"write {system} to another file (or rerun with --restart to start over)")
        config = record.meta.get("config")
        if config != fingerprint:
            raise MetrobenchError(
                f"{path}: case {record.case_id} was run with other settings (config {config}, now "
                f"{fingerprint}); rerun with --restart to start over, or write to another file")
        if record.case_id in hashes and record.meta.get("case_sha") != hashes[record.case_id]:
            raise MetrobenchError(
                f"{path}: case {record.case_id} has changed since it was run; rerun with --restart")
        if record.meta.get("retryable"):
            redo += 1
            continue
        if record.case_id in done:
            continue
        keep.append(record)
        done.add(record.case_id)
    if redo:
        write_transcript(path, keep)  # drop the failures that will be redone
    return done


class Progress:
    """A one-line progress report: cases done, failures, output tokens per second."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.done = self.failed = self.tokens = 0
        self.start = time.perf_counter()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_pct = -1

    def update(self, record: CaseRecord) -> None:
        self.done += 1
        self.failed += record.error is not None
        self.tokens += record.output_tokens
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        line = (f"{self.label}: {self.done}/{self.total} cases, {self.failed} failed, "
                f"{self.tokens / elapsed:,.0f} tok/s")
        pct = self.done * 10 // max(self.total, 1)
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
            self.stream.flush()
        elif pct != self._last_pct or self.done == self.total:
            self._last_pct = pct
            print(line, file=self.stream, flush=True)


def order_for_cache(cases: list[Case]) -> list[Case]:
    """Cases with identical conditional prompt blocks next to each other (stable otherwise).

    The system prompt differs between cases only in its conditional sections;
    running cases that share them back to back lets the server reuse the
    cached prompt prefix.
    """
    def key(case: Case) -> tuple:
        ctx = case.raw.get("system_context", {})
        return (bool(ctx.get("temporal_context")), bool(ctx.get("active_disruptions")),
                bool(ctx.get("accessibility_mode")), bool(ctx.get("policy_change")),
                bool(ctx.get("knowledge_query")))
    return sorted(cases, key=key)


@dataclass
class RunSummary:
    path: Path
    ran: int
    skipped: int
    failed: int
    wall_s: float


async def _run(cfg: ModelConfig, system: SystemData, todo: list[Case], writer: TranscriptWriter,
               client: ChatClient, progress: Progress, selection: dict[str, Any] | None) -> int:
    semaphore = asyncio.Semaphore(cfg.parallel)
    fingerprint = cfg.fingerprint()
    failed = 0

    async def one(case: Case) -> None:
        nonlocal failed
        async with semaphore:
            record = await run_case(client, system, case, model=cfg.name, max_rounds=cfg.max_rounds,
                                    tool_parser=cfg.tool_parser)
        record.meta.update(config=fingerprint, case_sha=case_hash(case))
        if selection is not None:
            record.meta["selection"] = selection
        writer.write(record)
        failed += record.error is not None
        progress.update(record)

    try:
        await asyncio.gather(*(one(case) for case in todo))
    finally:
        await client.aclose()
    return failed


def run_model(cfg: ModelConfig, system: SystemData, cases: list[Case], out: Path, *,
              base_url: str | None = None, restart: bool = False,
              progress_stream: TextIO | None = None, selection: Selection | None = None) -> RunSummary:
    """Run ``cases`` (skipping those already in ``out``) and append their records to ``out``.

    ``selection``: how ``cases`` were chosen, recorded in each record for scoring.
    """
    with transcript_lock(out):
        done = prepare_resume(out, cfg, cases, restart=restart, system=system.name)
        todo = order_for_cache([c for c in cases if c.id not in done])
        start = time.perf_counter()
        failed = 0
        if todo:
            client = ChatClient(cfg, base_url=base_url)
            progress = Progress(len(todo), f"{cfg.name}/{system.name}", progress_stream)
            with TranscriptWriter(out) as writer:
                failed = asyncio.run(_run(cfg, system, todo, writer, client, progress,
                                          selection.to_meta() if selection else None))
    return RunSummary(Path(out), len(todo), len(cases) - len(todo), failed, time.perf_counter() - start)

"""A resumable run of one model over the cases of one system.

Each finished case is appended to the transcript and flushed at once, so a
killed run loses only the cases in flight. A rerun skips the cases already
recorded, except those whose ending was the infrastructure's (an endpoint that is not
there: connection refused, a refused key, an unknown model: ``meta["retryable"]``;
:mod:`metrobench.agents.runner.protocol`): those are redone. A run that leaves any such
case fails (:meth:`RunSummary.problem`, which the commands raise as one
``metrobench: error:`` line counting the cases per ending and naming the cases and why);
one stopped by a fatal endpoint error (a refused key, an unknown
model, a server that never answered) sends no further case. Every record carries
the model-config fingerprint and its case's hash; a rerun under a different
configuration, against a changed case or for another system refuses to mix
them; the refusal of other settings names the fields that changed
(``max_tokens 512 → 256``). A case's record is its last one a resume keeps
(:func:`~metrobench.transcripts.records.current_records`); ``rerun_changed``
(``--rerun-changed``, the remedy a changed case's refusal names) reruns exactly the
selected cases whose data changed, their new records appended after the old, which stay;
``restart`` (``--restart``) sets the whole transcript aside (:func:`restart_aside`) and
starts a new one — a work transcript holds every view's paid-for cases, so it is never
deleted. ``set_aside`` (``--set-aside``, what the workflow
passes) starts a transcript made under other settings or serving afresh without losing
it: the old file is renamed to ``<name>.<its fingerprint>.jsonl`` beside it (never over
another file) and a new one begins, so a settings edit reruns and the paid-for cases stay. A transcript
begun here starts with its header (:func:`run_header`: model, system, settings, serving), checked
before the records on resume with the same refusals and set-aside; an old header-less one is resumed
by its records and never given a header in its middle. The whole run, resume check included, holds
the transcript's lock (:func:`~metrobench.transcripts.records.transcript_lock`): a
second run on the same file refuses instead of doubling or losing cases.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from metrobench.data.loader import SystemData
from metrobench.data.root import SYSTEM_BY_PREFIX
from metrobench.data.models import Case, case_hash  # case_hash: re-exported (plan and older callers import it here)
from metrobench.errors import MetrobenchError
from metrobench.agents.runner.client import ChatClient, RunStopped
from metrobench.agents.runner.config import IN_PROCESS, ModelConfig
from metrobench.agents.runner.loop import run_case
from metrobench.agents.runner.slots import run_concurrency
from metrobench.agents.serving_record import differences
from metrobench.data.selection import Selection
from metrobench.transcripts.records import (ENDINGS, CaseRecord, RunHeader, TranscriptWriter, current_records,
                                            ending, iter_transcript, read_header, read_transcript, rerun_on_resume,
                                            transcript_lock, write_transcript)


def changed_cases(current: dict[str, CaseRecord], hashes: dict[str, str]) -> list[str]:
    """The cases of ``hashes`` (case id -> :func:`case_hash` now) whose current record was made for
    other case data (``meta.case_sha``): what a resume refuses, or reruns with ``--rerun-changed``.
    Shared with ``metrobench plan``, which counts them as case runs."""
    return [case_id for case_id, record in current.items()
            if case_id in hashes and record.meta.get("case_sha") != hashes[case_id]]


@dataclass(frozen=True)
class ResumeState:
    """What a transcript holds for a resumed run: its current record of each case (the last a resume
    keeps: :func:`~metrobench.transcripts.records.current_records`) and, of the cases asked for, those
    whose data changed since their record was made (:func:`changed_cases`: run again)."""

    current: dict[str, CaseRecord]
    changed: list[str]

    @property
    def done(self) -> set[str]:
        """The cases a resume skips."""
        return set(self.current) - set(self.changed)


def other_settings(header: RunHeader | None, records: list[CaseRecord], fingerprint: str) -> bool:
    """Whether the transcript's header or any of its records was made under another settings fingerprint."""
    if header is not None and header.config != fingerprint:
        return True
    return any(record.meta.get("config") != fingerprint for record in records)


def resume_state(header: RunHeader | None, records: list[CaseRecord], fingerprint: str | None,
                 hashes: dict[str, str]) -> ResumeState | None:
    """The resume rule, one for the runner (:func:`prepare_resume`) and ``metrobench plan``: ``None`` when
    the transcript was made under other settings than ``fingerprint`` (a resume sets it aside or refuses
    it: nothing in it is done; ``None`` fingerprint: not compared); else its current records and the
    cases of ``hashes`` (case id -> :func:`case_hash` now) whose data changed."""
    if fingerprint is not None and other_settings(header, records, fingerprint):
        return None
    current = current_records(records)
    return ResumeState(current, changed_cases(current, hashes))


def _shown(value: Any) -> str:
    """A setting's value in a refusal: ``unset`` for None, JSON for a mapping, else as written."""
    if value is None:
        return "unset"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def setting_changes(recorded: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """The settings that differ, in words: ``["max_tokens 512 → 256"]`` (the recorded ``meta.settings``
    against this run's). Empty when they agree (then the prompt, tool parser, GGUF file or context
    per request changed: the rest of what the fingerprint covers)."""
    if not isinstance(recorded, dict):
        return ["no settings recorded"]
    return [f"{key} {_shown(recorded.get(key))} → {_shown(now.get(key))}"
            for key in sorted(set(recorded) | set(now)) if recorded.get(key) != now.get(key)]


_BEYOND_SETTINGS = "the prompt, tool parser, GGUF file or context per request"


def fingerprint_changes(cfg: ModelConfig, recorded_name: str | None, recorded_config: Any,
                        recorded_settings: dict[str, Any] | None) -> list[str]:
    """Why a transcript's fingerprint is not this run's, in words. The fingerprint hashes the model's
    ``name`` too, so a renamed model is said as such (``the model's name changed (a → b)``), and the
    rest of what it covers is blamed only where the old name with today's settings does not give the
    recorded fingerprint back."""
    changed = setting_changes(recorded_settings, cfg.settings())
    if recorded_name and recorded_name != cfg.name:
        renamed = f"the model's name changed ({recorded_name} → {cfg.name})"
        if changed:
            return [renamed, *changed]
        same_otherwise = cfg.model_copy(update={"name": recorded_name}).fingerprint() == recorded_config
        return [renamed] if same_otherwise else [renamed, _BEYOND_SETTINGS]
    return changed or [_BEYOND_SETTINGS]


def set_aside(path: Path, fingerprint: str) -> Path:
    """Rename ``path`` to ``<stem>.<fingerprint>.jsonl`` beside it (``-2``, ``-3``, ... when taken): never
    over another file, never deleted. Returns where it went."""
    stem, suffix = path.name.removesuffix(".jsonl"), ".jsonl"
    label = "".join(ch for ch in str(fingerprint) if ch.isalnum() or ch in "-_")[:16] or "unknown"
    for n in range(1, 10_000):
        aside = path.with_name(f"{stem}.{label}{'' if n == 1 else f'-{n}'}{suffix}")
        try:
            os.link(path, aside)  # fails on an existing name: nothing is overwritten
        except FileExistsError:
            continue
        except OSError:  # no hard links here: rename, having looked (the transcript's lock is held)
            if aside.exists():
                continue
            path.rename(aside)
            return aside
        path.unlink()  # the transcript now lives under the new name
        return aside
    raise MetrobenchError(f"{path}: cannot set it aside: {stem}.{label}-N.jsonl taken up to 9999")


def restart_aside(path: Path, stream: TextIO | None = None) -> Path | None:
    """``--restart``: the transcript at ``path`` renamed aside (:func:`set_aside`, labelled with its
    records' fingerprint) so the run starts a new one; never deleted, since a work transcript holds
    every view's paid-for cases. Returns where it went (``None``: no transcript, or an empty one)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    label = "restart"
    try:
        header = read_header(path)
        first = next(iter_transcript(path), None)
    except MetrobenchError:
        header = first = None  # unreadable: set aside all the same, under a plain label
    if header is not None and header.config:
        label = header.config
    elif first is not None and first.meta.get("config"):
        label = str(first.meta["config"])
    aside = set_aside(path, label)
    print(f"{path}: --restart: set aside as {aside}; starting afresh", file=stream or sys.stderr, flush=True)
    return aside


def prepare_resume(path: Path, cfg: ModelConfig, cases: list[Case], *, restart: bool,
                   system: str | None = None, serving: dict[str, Any] | None = None,
                   set_aside_changed: bool = False, rerun_changed: bool = False,
                   stream: TextIO | None = None) -> set[str]:
    """Ids already done in ``path``; drops retryable failures; refuses mismatched settings, serving or system.

    A case's record is its current one (:func:`~metrobench.transcripts.records.current_records`: the
    last a resume keeps). ``restart``: the transcript is set aside first (:func:`restart_aside`).
    ``set_aside_changed``: a transcript made under other settings or serving is renamed aside
    (:func:`set_aside`, said on ``stream``) and the run starts a new one instead. ``rerun_changed``:
    cases of ``cases`` whose data changed since their record was made (``meta.case_sha``) are not
    done: the run appends their new records, which supersede the old ones (kept in the file); without
    it such a case is refused, naming that remedy. No other case's record is touched."""
    path = Path(path)
    if restart:
        restart_aside(path, stream)
    if not path.exists():
        return set()
    hashes = {c.id: case_hash(c) for c in cases}
    fingerprint = cfg.fingerprint()
    header, records = read_transcript(path)
    # the header first (what the whole file is a run of), then each record's own stamps (all an old,
    # header-less transcript has); each mismatch takes the same way: refused, or set aside
    stamps: list[tuple[str, str, str, dict[str, Any]]] = []
    if header is not None:
        stamps.append(("header: the transcript", header.system, header.model,
                       {"config": header.config, "settings": header.settings, "serving": header.serving}))
    stamps += [(f"case {r.case_id}", r.system or SYSTEM_BY_PREFIX.get(r.case_id.split("-")[0], ""), r.model,
                r.meta) for r in records]
    for where, recorded, name, meta in stamps:
        if system is not None and recorded != system:
            whose = "header: field system: every case" if where.startswith("header") else where
            raise MetrobenchError(
                f"{path}: {whose} is a {recorded or 'unknown system'} case, not {system}; "
                f"write {system} to another file (or rerun with --restart to set it aside and start over)")
        config = meta.get("config")
        served_otherwise = differences(meta.get("serving"), serving) if serving else []
        if config != fingerprint or served_otherwise:
            if config != fingerprint:
                changed = fingerprint_changes(cfg, name, config, meta.get("settings"))
                what = f"was run with other settings ({', '.join(changed)}; config {config}, now {fingerprint})"
            else:
                what = f"was served otherwise ({'; '.join(served_otherwise)})"
            if set_aside_changed:
                aside = set_aside(path, str(config))
                print(f"{path}: {where} {what}: set aside as {aside}; starting afresh",
                      file=stream or sys.stderr, flush=True)
                return set()
            raise MetrobenchError(
                f"{path}: {where} {what}; rerun with --set-aside to keep it aside and start "
                f"afresh, or write to another file")
    state = resume_state(header, records, fingerprint, hashes)
    assert state is not None  # every stamp was compared above: a mismatch has returned or raised
    changed = state.changed
    if changed and not rerun_changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise MetrobenchError(
            f"{path}: case {changed[0]}{more} has changed in the data since it was run; rerun with "
            f"--rerun-changed to redo only the changed cases (their old records stay in the file, superseded), "
            f"every other case kept")
    if changed:
        print(f"{path}: {len(changed)} case{'s' if len(changed) != 1 else ''} changed in the data "
              f"since run ({', '.join(changed)}): rerunning them; their old records stay, superseded",
              file=stream or sys.stderr, flush=True)
    if any(rerun_on_resume(record) for record in records):
        # drop the failures to redo; the header (if the file has one) stays its first line
        write_transcript(path, [r for r in records if not rerun_on_resume(r)], header)
    return state.done


def run_header(cfg: ModelConfig, system: str, serving: dict[str, Any] | None) -> RunHeader:
    """The header a run writes when it begins a transcript: model, system, settings (fingerprint and
    values), serving record. No selection: a transcript runs append to may hold several targets' (a
    work transcript), so each record keeps its own; a view, cut for one, states it in its header."""
    return RunHeader(model=cfg.name, system=system, config=cfg.fingerprint(), settings=cfg.settings(),
                     serving=serving)


def duration(seconds: float) -> str:
    """Seconds as a progress line shows them: ``45s``, ``2m10s``, ``1h05m``."""
    total = max(0, int(round(seconds)))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def eta_s(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the pace of the cases so far: ``elapsed`` × (total − done) / done (the concurrency
    is in the pace already); ``None`` before the first case ends, 0 when all have."""
    if done <= 0:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


class Progress:
    """What a run shows while it runs (:class:`~metrobench.agents.runner.loop.RoundObserver`).

    A status line — cases done of the run's, failures, output tokens per second, time elapsed, an ETA at
    the pace of the cases so far, and the longest-running case in flight once it has run
    ``long_case_s`` (its id, its round, its seconds) — at most once every ``interval`` seconds: on a
    terminal one line redrawn in place with a bar (default every 1 s), in a log plain lines (every
    10 s). :meth:`tick` prints it when it is due (the run's reporter task calls it while cases are in
    flight), :meth:`update` when a case ends; the last case's line always comes, ending in the run's
    totals. Where replies keep stopping at ``max_tokens`` (``finish_reason`` ``length``, ``LENGTH_NOTICE``
    of them), one line says so, once. ``clock`` and ``tty`` are injectable: tests give the events and
    the time and read what is printed.
    """

    #: Replies cut at ``max_tokens`` before the one notice.
    LENGTH_NOTICE = 3
    #: A case in flight this long is named on the status line.
    LONG_CASE_S = 30.0
    #: Seconds between status lines unless given: on a terminal, in a log.
    TTY_INTERVAL_S, LOG_INTERVAL_S = 1.0, 10.0
    #: The terminal's bar, in characters.
    BAR = 20

    def __init__(self, total: int, label: str, stream: TextIO | None = None, *, interval: float | None = None,
                 clock: Any = time.monotonic, tty: bool | None = None, long_case_s: float | None = None,
                 max_tokens: int | None = None) -> None:
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.clock = clock
        self.done = self.failed = self.tokens = 0
        self.start = clock()
        self.tty = (hasattr(self.stream, "isatty") and self.stream.isatty()) if tty is None else tty
        self.interval = (self.TTY_INTERVAL_S if self.tty else self.LOG_INTERVAL_S) if interval is None else interval
        self.long_case_s = self.LONG_CASE_S if long_case_s is None else long_case_s
        self.max_tokens = max_tokens
        #: The cases in flight: id -> (round, when the case began).
        self.running: dict[str, tuple[int, float]] = {}
        self.cut_replies = 0
        self.noticed = False
        self._last_line = self.start
        self._drawn = 0   # characters of the status line on the terminal now (0: none)

    # -- the events --------------------------------------------------------------------------------
    def begin(self, note: str) -> None:
        """The run's first line: how many cases it runs and ``note`` (how many at a time, and why)."""
        self._put(f"{self.label}: {self.total} case{'s' if self.total != 1 else ''} to run, {note}")

    def round_started(self, case_id: str, round_no: int) -> None:
        began = self.running.get(case_id, (0, None))[1]
        self.running[case_id] = (round_no, self.clock() if began is None else began)

    def round_ended(self, case_id: str, round_no: int, finish_reason: str | None) -> None:
        if finish_reason != "length":
            return
        self.cut_replies += 1
        if self.cut_replies >= self.LENGTH_NOTICE and not self.noticed:
            self.noticed = True
            cap = f" ({self.max_tokens:,} tokens)" if self.max_tokens else ""
            self._put(f"{self.label}: note: {self.cut_replies} replies so far stopped at max_tokens{cap}, "
                      'finish_reason "length": they are cut short and take the longest; a larger max_tokens '
                      "lets them finish, a smaller one bounds each round (either changes the settings "
                      "fingerprint); said once")

    def forget(self, case_id: str) -> None:
        """A case left unrecorded (the run was stopped): no longer in flight."""
        self.running.pop(case_id, None)

    def update(self, record: CaseRecord) -> None:
        """A case ended and was recorded."""
        self.running.pop(record.case_id, None)
        self.done += 1
        self.failed += record.error is not None
        self.tokens += record.output_tokens
        self.tick(final=self.done >= self.total)

    # -- the lines ---------------------------------------------------------------------------------
    def status(self, now: float | None = None) -> str:
        """The status line at ``now`` (the clock's), without the label."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 0.0)
        line = (f"{self.done}/{self.total} cases, {self.failed} failed, "
                f"{self.tokens / max(elapsed, 1e-9):,.0f} tok/s, {duration(elapsed)} elapsed")
        if self.done >= self.total:
            return line
        eta = eta_s(self.done, self.total, elapsed)
        if eta is not None:
            line += f", ETA {duration(eta)}"
        long = sorted(((now - began, case_id, round_no) for case_id, (round_no, began) in self.running.items()
                       if now - began >= self.long_case_s), reverse=True)
        if long:
            seconds, case_id, round_no = long[0]
            line += f"; {case_id} round {round_no}, {seconds:.0f} s"
            if len(long) > 1:
                line += f" (and {len(long) - 1} more over {self.long_case_s:.0f} s)"
        return line

    def tick(self, final: bool = False) -> None:
        """Print the status line if one is due (``interval`` since the last), or ``final``ly."""
        now = self.clock()
        if not final and now - self._last_line < self.interval:
            return
        self._last_line = now
        line = self.status(now)
        if self.tty:
            filled = self.done * self.BAR // max(self.total, 1)
            text = f"{self.label}: [{'#' * filled}{'.' * (self.BAR - filled)}] {line}"
            pad = " " * max(0, self._drawn - len(text))
            self.stream.write("\r" + text + pad + ("\n" if final else ""))
            self._drawn = 0 if final else len(text)
            self.stream.flush()
        else:
            print(f"{self.label}: {line}", file=self.stream, flush=True)

    def _put(self, text: str) -> None:
        """A line of its own (on a terminal, below the status line, which is redrawn at the next tick)."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self._drawn = 0
        print(text, file=self.stream, flush=True)


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
    """What one run did: cases run (recorded), skipped (already done), failed, per ending."""

    path: Path
    ran: int
    skipped: int
    failed: int
    wall_s: float
    endings: Counter[str] = field(default_factory=Counter)
    not_run: int = 0               # cases a stopped run never recorded (a rerun runs them)
    stopped: str | None = None     # the fatal endpoint error that stopped the run
    #: The cases that ended on the infrastructure, with their errors, in the order they ended.
    failures: list[tuple[str, str]] = field(default_factory=list)

    def counts(self) -> str:
        """``36 cases: 30 answered, 4 round budget, 2 infrastructure (retryable)``."""
        parts = [f"{self.endings[name]} {label}" for name, label in ENDINGS.items() if self.endings[name]]
        if self.not_run:
            parts.append(f"{self.not_run} not run (stopped)")
        total = self.ran + self.not_run
        return f"{total} case{'s' if total != 1 else ''}" + (": " + ", ".join(parts) if parts else "")

    def problem(self) -> str | None:
        """The run's failure as one line (``None`` when every case ended on the model's doing)."""
        infra = self.endings["infrastructure"]
        if self.stopped is not None:
            return (f"{self.path}: {_short(self.stopped)}; stopped the run ({self.counts()}); "
                    "fix the endpoint, key or model name and rerun the same command")
        if infra:
            return (f"{self.path}: {infra} of {self.ran} cases ended on the endpoint, not the model "
                    f"({self.which()}); they stay retryable: rerun the same command "
                    f"to redo exactly them ({self.counts()})")
        return None

    def which(self, shown: int = 5) -> str:
        """The infrastructure's cases and why: ``MARTA-A-001: ConnectError: ...; ... (and 3 more)``."""
        named = "; ".join(f"{case_id}: {_short(error)[:160]}" for case_id, error in self.failures[:shown])
        more = len(self.failures) - shown
        return named + (f" (and {more} more)" if more > 0 else "")


def _short(text: str) -> str:
    return " ".join(text.split())[:240]


class _Tally:
    """The records of one run as they are written: counts per ending, failures, the first infrastructure error."""

    def __init__(self) -> None:
        self.endings: Counter[str] = Counter()
        self.written = self.failed = 0
        self.failures: list[tuple[str, str]] = []

    def add(self, record: CaseRecord) -> None:
        kind = ending(record)
        self.endings[kind] += 1
        self.written += 1
        self.failed += record.error is not None
        if kind == "infrastructure":
            self.failures.append((record.case_id, str(record.error)))


def open_client(cfg: ModelConfig, base_url: str | None = None) -> ChatClient | Any:
    """The run's client: the endpoint's (:class:`ChatClient`), or for ``provider: scripted`` the rule
    agent's in-process one (:class:`~metrobench.agents.rule_agent.ScriptedClient`), which answers in
    the same reply shape, so its cases are run, recorded and resumed as any model's."""
    if cfg.provider == "scripted":
        from metrobench.agents.rule_agent import ScriptedClient

        return ScriptedClient(cfg)
    return ChatClient(cfg, base_url=base_url)


async def _report(progress: Progress) -> None:
    """The run's reporter: :meth:`Progress.tick` (a status line when one is due) while cases are in flight."""
    poll = min(progress.interval, 1.0)
    while True:
        await asyncio.sleep(poll)
        progress.tick()


async def _run(cfg: ModelConfig, system: SystemData, todo: list[Case], writer: TranscriptWriter,
               client: ChatClient | Any, progress: Progress, selection: dict[str, Any] | None,
               serving: dict[str, Any] | None = None, parallel: int | None = None) -> _Tally:
    semaphore = asyncio.Semaphore(parallel or cfg.parallel)
    fingerprint = cfg.fingerprint()
    tally = _Tally()

    async def one(case: Case) -> None:
        async with semaphore:
            if client.stopped is not None:
                return  # not sent: a rerun runs it
            try:
                record = await run_case(client, system, case, model=cfg.name, max_rounds=cfg.max_rounds,
                                        protocol=cfg.protocol, observer=progress)
            except RunStopped:
                progress.forget(case.id)
                return
        record.meta.update(config=fingerprint, case_sha=case_hash(case), settings=cfg.settings())
        if selection is not None:
            record.meta["selection"] = selection
        if serving is not None:
            record.meta["serving"] = serving
        writer.write(record)
        tally.add(record)
        progress.update(record)

    reporter = asyncio.create_task(_report(progress)) if progress.interval > 0 else None
    try:
        await asyncio.gather(*(one(case) for case in todo))
    finally:
        if reporter is not None:
            reporter.cancel()
        await client.aclose()
    return tally


def run_model(cfg: ModelConfig, system: SystemData, cases: list[Case], out: Path, *,
              base_url: str | None = None, restart: bool = False,
              progress_stream: TextIO | None = None, selection: Selection | None = None,
              serving: dict[str, Any] | None = None, set_aside_changed: bool = False,
              rerun_changed: bool = False, progress_interval: float | None = None) -> RunSummary:
    """Run ``cases`` (skipping those already in ``out``) and append their records to ``out``.

    ``selection``: how ``cases`` were chosen, recorded in each record for scoring; ``serving``:
    the serving record (:mod:`metrobench.agents.serving_record`), recorded in each record and
    compared on resume; ``set_aside_changed``: a transcript made otherwise is set aside, not refused;
    ``rerun_changed``: cases changed in the data since they were run are run again (:func:`prepare_resume`);
    ``progress_interval``: seconds between status lines while cases run (:class:`Progress`; ``None``: 1 on a
    terminal, 10 in a log; 0: a line when a case ends only). The run's first line says how many requests it
    keeps in flight and why (:func:`~metrobench.agents.runner.slots.run_concurrency`: a local server's slots).
    """
    with transcript_lock(out):
        done = prepare_resume(out, cfg, cases, restart=restart, system=system.name, serving=serving,
                              set_aside_changed=set_aside_changed, rerun_changed=rerun_changed,
                              stream=progress_stream)
        todo = [c for c in cases if c.id not in done]
        if cfg.provider not in IN_PROCESS:  # in-process (scripted): no prompt cache, the selection's order
            todo = order_for_cache(todo)
        start = time.perf_counter()
        tally, stopped = _Tally(), None
        if todo:
            parallel, why = run_concurrency(cfg, base_url)
            client = open_client(cfg, base_url)
            progress = Progress(len(todo), f"{cfg.name}/{system.name}", progress_stream,
                                interval=progress_interval, max_tokens=cfg.max_tokens)
            progress.begin(f"{parallel} at a time ({why})")
            with TranscriptWriter(out, run_header(cfg, system.name, serving)) as writer:
                tally = asyncio.run(_run(cfg, system, todo, writer, client, progress,
                                         selection.to_meta() if selection else None, serving, parallel))
            stopped = client.stopped
    return RunSummary(Path(out), tally.written, len(cases) - len(todo), tally.failed, time.perf_counter() - start,
                      tally.endings, len(todo) - tally.written, stopped, tally.failures)

"""Transcripts: what one agent did on each case of one system, one JSON object per line.

A transcript file (``runs/{model}/{system}.jsonl``) is append-only: the runner
(the rule agent's runs included) writes each case's record as soon as the case ends and flushes
it, so a killed run loses only the cases in flight and a rerun can skip the
cases already present. A case may have more than one record (rerun after its data
changed, ``--rerun-changed``): its current record is its last one a resume keeps
(:func:`current_records`), and the earlier ones stay, superseded. The record carries the reference runner's ``CaseResult``
fields under the same names (spec §6.7), plus ``model`` and ``system``, so the
scorer treats our transcripts and the reference harness's result JSON the same
way: :func:`read_run` accepts either.

One process at a time writes a transcript: :func:`transcript_lock` holds an
OS lock (``flock``) on a sidecar file ``.<name>.lock`` beside it for the whole
run, so a second run on the same file refuses at once instead of paying for
every case twice or appending to a file the first is rewriting. The kernel
drops the lock when the process ends, however it ends; the empty sidecar stays.

How a case ended is ``meta["ending"]`` (:data:`ENDINGS`), and its kind
``meta["ending_kind"]``: ``"model"`` (the case's own course, as the reference's
runner ended it — an answer, the round budget, empty replies, the token limit, an
HTTP status the endpoint gave, a time-out, a malformed reply, unreadable tool-call
arguments — recorded and scored; :mod:`metrobench.agents.runner.protocol`),
``"context"`` (the conversation outgrew the
server's context: llama-server's HTTP 400 ``exceed_context_size_error``; the
serving configuration's limit, not the model's answer, so counted apart, yet
recorded and scored as the reference scores it: an error, response null) or
``"infrastructure"`` (the endpoint was not there: connection refused or reset, a
connection never accepted, a refused key, an unknown model; the case is redone by a
rerun and the run fails; records written before the paper's protocol was the default
also have time-outs, 5xx and malformed replies here, and keep them). :func:`ending` and :func:`ending_kind` read them, and derive them
for records written before the fields existed (a ``meta["retryable"]`` record is
infrastructure; an HTTP 400 whose body says the context was exceeded is
``context``), so old transcripts read and score exactly as before; an ending
recorded is never re-derived.

The first line of a transcript is its header (:class:`RunHeader`, issue 42): one object
``{"header": {...}}`` (a key no record has) stating once what the whole file is a run of:
``model``, ``system``, ``config`` (the settings fingerprint) and ``settings``, ``serving`` (the
serving record), ``selection`` (a view's, which holds one; ``null`` in a transcript runs append to,
whose records each keep their own, since several targets' runs share a work transcript), ``version``
(the metrobench that began the file) and ``format`` (:data:`FORMAT`). It holds no time stamp, so the
bytes stay a function of the inputs. :class:`TranscriptWriter` writes it when it begins a file;
:func:`write_transcript` writes it first when given one; a header-less transcript (format 1, from
before the header) is never given one in the middle: it stays header-less until ``--restart`` or
``--set-aside`` starts a new file. Records keep what varies per case (case hash, ending, timings) and,
still, the run stamps (``meta.config``, ``settings``, ``serving``, ``selection``): the resume of old
transcripts and the paper's settings and serving tables read them per record. Readers
(:func:`iter_transcript`, :func:`read_run`) never count the header as a case; :func:`read_run` takes
model and system from it (:attr:`Run.header`), and from the records (the first that names them, else
the case ids' prefix) only for old transcripts and the reference's result JSON.

Text is written as UTF-8; a lone surrogate (which JSON can carry but UTF-8
cannot encode) is written as U+FFFD REPLACEMENT CHARACTER, so no record a model
produced can fail to be written.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from metrobench import __version__
from metrobench.atomic import atomic_open, lock_path, sidecar_lock
from metrobench.errors import MetrobenchError
from metrobench.jsonl import iter_objects, read_utf8

#: Error recorded for a case that a run should have contained but does not.
MISSING = "missing"

#: Each ending (``meta["ending"]``) as a count line names it.
ENDINGS = {"answered": "answered", "round_budget": "round budget", "empty_replies": "empty replies",
           "token_limit": "token limit", "refused": "refused by the endpoint", "timeout": "time-out",
           "malformed": "malformed reply", "arguments": "unreadable tool-call arguments",
           "context": "over the server's context", "infrastructure": "infrastructure (retryable)",
           "error": "other error", "missing": "missing"}
#: The kinds of ending (``meta["ending_kind"]``).
MODEL, CONTEXT, INFRASTRUCTURE = "model", "context", "infrastructure"
#: What an HTTP 400 body says when the prompt outgrew the server's context: llama-server's
#: error type (tools/server: ``exceed_context_size_error``, with ``n_prompt_tokens`` and
#: ``n_ctx``) and its two messages, the second from a slot whose cache cannot be shifted.
CONTEXT_MARKERS = ("exceed_context_size_error", "exceeds the available context size",
                   "larger than the max context size")
#: The transcript format written (a header's ``format``); 1 is the header-less format before it.
FORMAT = 2
#: The header line's one key (no record has it).
HEADER = "header"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_ERROR_ENDINGS = (("Exhausted ", "round_budget"), ("empty-response", "empty_replies"),
                  ("truncated:", "token_limit"), ("timeout:", "timeout"), ("malformed reply:", "malformed"))


@dataclass
class CaseRecord:
    """One case's outcome: the scored terminal state and everything that led to it."""

    case_id: str
    model: str = ""
    system: str = ""
    response: Any = None
    tool_calls_made: list[dict[str, Any]] = field(default_factory=list)
    raw_content: str = ""
    reasoning_content: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    ttft_ms: float = 0.0
    e2e_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    api_rounds: int = 0
    error: str | None = None
    empty_rounds: int = 0
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        # the fields as they are (not dataclasses.asdict, whose deep copy of every tool answer
        # was most of the rule agent's run time); the same bytes
        return _dumps({name: getattr(self, name) for name in self.__dataclass_fields__})

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, model: str = "", system: str = "") -> "CaseRecord":
        """A record from a transcript line or a reference ``CaseResult`` (unknown keys kept in meta)."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in raw.items() if k in known}
        extra = {k: v for k, v in raw.items() if k not in known}
        record = cls(**values)
        if extra:
            record.meta = {**record.meta, **extra}
        record.model = record.model or model
        record.system = record.system or system
        if record.tool_calls_made is None:
            record.tool_calls_made = []
        return record

    @classmethod
    def missing(cls, case_id: str, model: str, system: str) -> "CaseRecord":
        """The stand-in for a case absent from a run: scored as a failure, never dropped."""
        return cls(case_id=case_id, model=model, system=system, error=MISSING)


def ending(record: CaseRecord) -> str:
    """How ``record``'s case ended (a key of :data:`ENDINGS`), recorded or derived from its error."""
    recorded = record.meta.get("ending")
    if isinstance(recorded, str) and recorded in ENDINGS:
        return recorded
    if record.error is None:
        return "answered"
    if record.meta.get("retryable"):
        return "infrastructure"
    error = str(record.error)
    if error == MISSING:
        return "missing"
    if context_exceeded(error):
        return "context"
    if re.match(r"\d{3}: ", error):
        return "refused"  # an HTTP status the endpoint gave for this case's request
    return next((name for prefix, name in _ERROR_ENDINGS if error.startswith(prefix)), "error")


def context_exceeded(error: str) -> bool:
    """Whether a recorded error (``"<status>: <body>"``) is the server's refusal of a prompt
    longer than its context: an HTTP 400 naming :data:`CONTEXT_MARKERS`."""
    return error.startswith("400: ") and any(marker in error for marker in CONTEXT_MARKERS)


def ending_kind(record: CaseRecord) -> str:
    """``"infrastructure"`` (the endpoint failed; redone by a rerun), ``"context"`` (the
    prompt outgrew the server's context; scored) or ``"model"`` (scored)."""
    kind = ending(record)
    return INFRASTRUCTURE if kind == "infrastructure" else CONTEXT if kind == "context" else MODEL


def rerun_on_resume(record: CaseRecord) -> bool:
    """Whether a resumed run redoes this record's case: its ending was the infrastructure's
    (``meta["retryable"]``, set by :func:`mark_ending`). The one predicate the runner's resume and
    ``metrobench plan``'s count of remaining case runs share."""
    return bool(record.meta.get("retryable"))


def current_records(records: Iterable[CaseRecord]) -> dict[str, CaseRecord]:
    """Each case's current record, as a resume and ``metrobench plan`` count a transcript's done cases:
    its last record that a resume keeps (:func:`rerun_on_resume` false; the views and the scorer read
    its last record of any ending, :func:`latest_records`). A record appended later for a case
    supersedes the earlier ones (a case rerun after its data changed, ``--rerun-changed``), which stay
    in the file. In file order of the records chosen."""
    current: dict[str, CaseRecord] = {}
    for record in records:
        if rerun_on_resume(record):
            continue
        current.pop(record.case_id, None)  # re-inserted: the order is the later record's
        current[record.case_id] = record
    return current


def mark_ending(record: CaseRecord) -> None:
    """Record the ending and its kind in ``meta`` (and ``retryable``, which resume reads)."""
    record.meta["ending"] = ending(record)
    record.meta["ending_kind"] = ending_kind(record)
    record.meta["retryable"] = record.meta["ending_kind"] == INFRASTRUCTURE


@dataclass(frozen=True)
class RunHeader:
    """A transcript's first line: what every record of the file is a run of, stated once."""

    model: str
    system: str
    config: str | None = None
    settings: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    selection: dict[str, Any] | None = None
    version: str = __version__
    format: int = FORMAT

    def to_json(self) -> str:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return _dumps({HEADER: fields})

    def with_selection(self, selection: dict[str, Any] | None) -> "RunHeader":
        """The same header stating ``selection`` (a view's)."""
        return RunHeader(**{**{n: getattr(self, n) for n in self.__dataclass_fields__}, "selection": selection})

    @classmethod
    def from_line(cls, raw: dict[str, Any], path: Path) -> "RunHeader":
        """The header of a parsed first line (``{"header": {...}}``); a malformed one names the file and field."""
        body = raw.get(HEADER)
        if not isinstance(body, dict):
            raise MetrobenchError(f"{path}: line 1: field header: must be an object")
        for name in ("model", "system"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise MetrobenchError(f"{path}: line 1: field header.{name}: must be a non-empty string")
        # an int 1..FORMAT and nothing else: bool is an int in Python (true would read as format 1, and
        # 0 or -1 passed as "not newer"), and a header is only ever written with a positive format
        form = body.get("format")
        if type(form) is not int or form < 1:
            shown = json.dumps(form) if isinstance(form, (bool, int, float, type(None))) else type(form).__name__
            raise MetrobenchError(f"{path}: line 1: field header.format: {shown} is not a transcript format "
                                  f"(a whole number, 1 to {FORMAT}); the header was not written by metrobench")
        if form > FORMAT:
            raise MetrobenchError(f"{path}: line 1: field header.format: {form} is not a transcript format this "
                                  f"metrobench reads (1 to {FORMAT}); update metrobench")
        for name, kind, words in (("config", str, "a string"), ("version", str, "a string"),
                                  ("settings", dict, "an object"), ("serving", dict, "an object"),
                                  ("selection", dict, "an object")):
            if body.get(name) is not None and not isinstance(body[name], kind):
                raise MetrobenchError(f"{path}: line 1: field header.{name}: must be {words} (or absent)")
        known = {k: v for k, v in body.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _dumps(value: Any) -> str:
    """One line of compact JSON, UTF-8 text as it is; a lone surrogate written as U+FFFD."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _LONE_SURROGATE.sub("\ufffd", text) if _LONE_SURROGATE.search(text) else text


@dataclass
class Run:
    """The records of one run file, in file order, and what kind of file it was."""

    path: Path
    records: list[CaseRecord]
    model: str
    system: str
    kind: str  # "transcript" (our JSONL) or "reference" (the reference runner's JSON)
    header: RunHeader | None = None  # a transcript's header (None: an old transcript, a reference file)


class TranscriptWriter:
    """Appends records to a transcript file, one flushed and fsynced line per case.

    ``header``: written first when the writer begins the file (none there, or empty after cutting a
    killed writer's unfinished line); a file that already holds lines is appended to as it is, so an
    old header-less transcript never gains a header in its middle."""

    def __init__(self, path: Path, header: RunHeader | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_partial_last_line(self.path)
        begins = not self.path.exists() or self.path.stat().st_size == 0
        self._fh: TextIO = open(self.path, "a", encoding="utf-8")
        if header is not None and begins:
            self._fh.write(header.to_json() + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def write(self, record: CaseRecord) -> None:
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "TranscriptWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Transcripts this process holds the lock of (resolved path -> nesting depth).
_HELD: dict[str, int] = {}


@contextmanager
def transcript_lock(path: Path, wait: bool = False) -> Iterator[None]:
    """Hold the transcript's writer lock, or refuse when another process holds it.

    ``wait``: block until the other process lets go instead (two views of one model's
    work transcript, planned side by side, take turns; the second resumes where the
    first stopped). Re-entrant within one process (``bench`` takes it before starting a server,
    the run takes it again); flock locks belong to the open file, so a nested
    acquisition must not open the sidecar a second time.
    """
    path = Path(path)
    key = str(path.resolve())
    if _HELD.get(key):
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return

    def busy() -> None:
        if wait:
            print(f"{path}: another metrobench process is running this model on this system; "
                  "waiting for it to finish", file=sys.stderr, flush=True)
        else:
            raise MetrobenchError(f"{path}: another metrobench process is writing this transcript "
                                  f"(lock {lock_path(path).name}); wait for it to finish or use another --out")

    with sidecar_lock(path, busy):
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]


def _drop_partial_last_line(path: Path) -> None:
    """Cut a line left unfinished by a killed writer, so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        fh.truncate(cut)


def write_transcript(path: Path, records: Iterable[CaseRecord], header: RunHeader | None = None) -> None:
    """Write a whole transcript at once (atomically: temporary file, then rename), ``header`` first if given."""
    with atomic_open(path) as fh:
        if header is not None:
            fh.write(header.to_json() + "\n")
        for record in records:
            fh.write(record.to_json() + "\n")


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of a transcript, the header included (only as line 1)."""
    path = Path(path)
    for number, raw in iter_objects(path, unfinished="skip"):
        if HEADER in raw and "case_id" not in raw:
            if number != 1:
                raise MetrobenchError(f"{path}: line {number}: field header: a header belongs on the first "
                                      "line only (two transcripts joined?)")
        elif not isinstance(raw.get("case_id"), str):
            raise MetrobenchError(f"{path}: line {number}: field case_id: each line must be a JSON object "
                                  "with a string case_id")
        yield number, raw


def read_header(path: Path) -> RunHeader | None:
    """A transcript's header (``None``: an old, header-less transcript, or an empty file)."""
    path = Path(path)
    if not path.is_file():
        return None
    for _, raw in _lines(path):
        return RunHeader.from_line(raw, path) if HEADER in raw and "case_id" not in raw else None
    return None


def iter_transcript(path: Path) -> Iterator[CaseRecord]:
    """Records of a JSONL transcript (never its header); a malformed line is an error naming the file and line.

    An unterminated last line is what a killed writer leaves behind: it is
    skipped with a warning (that case then counts as missing, never dropped).
    """
    return _records(Path(path), [])


def read_transcript(path: Path) -> tuple[RunHeader | None, list[CaseRecord]]:
    """A transcript's header (``None``: a header-less old one) and its records, in one reading."""
    found: list[RunHeader] = []
    records = list(_records(Path(path), found))
    return (found[0] if found else None), records


def _records(path: Path, found: list[RunHeader]) -> Iterator[CaseRecord]:
    """The records of ``path``; its header, when it has one, appended to ``found`` (records missing
    model or system take the header's)."""
    header: RunHeader | None = None
    for number, raw in _lines(path):
        if number == 1 and HEADER in raw and "case_id" not in raw:
            header = RunHeader.from_line(raw, path)
            found.append(header)
            continue
        try:
            yield CaseRecord.from_dict(raw, model=header.model if header else "",
                                       system=header.system if header else "")
        except TypeError as exc:
            raise MetrobenchError(f"{path}: line {number}: case {raw['case_id']}: {exc}") from None


def latest_records(records: Iterable[CaseRecord]) -> tuple[dict[str, CaseRecord], list[str]]:
    """Each case's record, the last of its records in file order (keyed in order of first appearance),
    and the ids of the cases recorded more than once.

    The one rule every reader of a run follows (the scorer, the views, the training set, the resume's
    rewrite): the runner appends a case again only after dropping its retryable failure, so of two
    records of one case the later is the newer; a transcript joined by hand is read the same way.
    """
    latest: dict[str, CaseRecord] = {}
    doubled: dict[str, None] = {}
    for record in records:
        if record.case_id in latest:
            doubled[record.case_id] = None
        latest[record.case_id] = record
    return latest, list(doubled)


def read_run(path: Path | str) -> Run:
    """Read our JSONL transcript or the reference harness's result JSON (spec §6.7)."""
    path = Path(path)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such run file")
    text = read_utf8(path)
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        doc = None  # several objects, one per line: a transcript
    reference = isinstance(doc, dict) and "results" in doc and "case_id" not in doc
    if reference:
        return _read_reference(path, doc)
    header, records = read_transcript(path)
    if header is not None:  # the header states them; a record that says otherwise is a joined file
        for record in records:
            for name in ("model", "system"):
                if getattr(record, name) != getattr(header, name):
                    raise MetrobenchError(
                        f"{path}: case {record.case_id}: field {name}: {getattr(record, name)!r}, but the "
                        f"header says {getattr(header, name)!r}; write each run to its own file")
        return Run(path, records, header.model, header.system, "transcript", header)
    # an old, header-less transcript: the first record that names them
    model = next((r.model for r in records if r.model), "")
    system = next((r.system for r in records if r.system), "")
    return Run(path, records, model, system, "transcript")


def _read_reference(path: Path, doc: dict[str, Any]) -> Run:
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise MetrobenchError(f"{path}: field results: a reference result file has a 'results' list")
    meta = doc.get("metadata") or {}
    model = str(doc.get("model") or meta.get("llm_model") or "")
    system = str(doc.get("system") or meta.get("system") or "")
    records = []
    for index, raw in enumerate(doc["results"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("case_id"), str):
            raise MetrobenchError(f"{path}: field results[{index}].case_id: "
                                  "each result must be an object with a string case_id")
        try:
            records.append(CaseRecord.from_dict(raw, model=model, system=system))
        except TypeError as exc:
            raise MetrobenchError(f"{path}: case {raw['case_id']}: {exc}") from None
    return Run(path, records, model, system, "reference")

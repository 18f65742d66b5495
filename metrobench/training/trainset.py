"""The distillation training set: teacher traces that scored well, train partition only.

A trace is kept when its case is in the train partition, its run ended without
an error, its Tier 1 is at least the threshold (90 % in the paper) and it ends
finished: in every user turn of its conversation, the last
``submit_assistant_state`` was accepted by the kiosk (its tool answer is
``{"accepted": true, ...}``), so each example ends, as the reference's do
(spec §11.2), on the tool result of an accepted submission. Several teachers
may have solved a case: the higher Tier 1 wins, ties go to the teacher listed
first. A case recorded twice in a teacher's transcript is read from its last record, the one
its Tier 1 was scored from (:func:`~metrobench.transcripts.records.latest_records`, the
scorer's rule), with a warning. :func:`select_traces` counts, per teacher and category, the traces each
reason dropped (:data:`DROP_REASONS`, checked in that order). Each example is the conversation in OpenAI message format
(tool-call arguments as JSON strings, reasoning stripped) with the tool schemas
the model saw, so training renders it exactly as inference does.

Any model can teach, the rule agent included (``provider: scripted``: its records hold
their conversation as every model's do). A record without one (a rule-agent transcript
written before it ran in the runner's loop) is dropped as ``no_messages``, counted, never
guessed at. A recorded tool call without a function name (a foreign transcript's) cannot
be trained on: it is one error naming the file, the case and the field.

Tool-call arguments are stored in the form llama-server renders past calls
in at inference (:func:`canonical_arguments`): the server parses each call's
arguments and re-serialises them (``", "`` and ``": "`` separators, non-ASCII
kept as is), so a teacher's compact ``{"a":1}`` would otherwise be trained in
a spelling the student never sees again. ``tests/test_training.py`` checks the
rendered training text against the real server's ``/apply-template`` byte for
byte.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrobench import layout
from metrobench.data.loader import Benchmark
from metrobench.data.root import CASE_PREFIX, SYSTEMS
from metrobench.atomic import atomic_open, write_text
from metrobench.errors import MetrobenchError
from metrobench.agents.prompts import TOOLS
from metrobench.transcripts.records import CaseRecord, latest_records, read_run
from metrobench.vocabulary import CATEGORIES, SUBMIT_TOOL

#: Why a teacher's train-partition trace is not in the training set, in the order checked.
DROP_REASONS = ("run_error", "unscored", "below_threshold", "no_messages", "no_submission", "refused", "outranked")
DROP_HELP = {
    "run_error": "the run ended on an error",
    "unscored": "no Tier 1 for the case",
    "below_threshold": "Tier 1 below the threshold",
    "no_messages": "a record without its conversation (a rule-agent transcript from before it ran in the runner's "
                   "loop: rerun it)",
    "no_submission": "a turn without any submission",
    "refused": "a turn whose last submission the kiosk refused",
    "outranked": "another teacher's trace of the case scored higher (or tied, listed first)",
}


class HeldOutLeak(MetrobenchError):
    """A held-out case reached the training set: the study would be invalid."""


@dataclass
class Example:
    case_id: str
    teacher: str
    tier1: float
    messages: list[dict[str, Any]]

    def to_json(self) -> str:
        return json.dumps({"messages": self.messages, "tools": TOOLS,
                           "meta": {"case_id": self.case_id, "teacher": self.teacher,
                                    "tier1_pct": self.tier1}}, ensure_ascii=False)


def canonical_arguments(arguments: Any) -> str:
    """Tool-call arguments as the JSON text llama-server renders them with (text that is not JSON: unchanged)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _call_field(call: Any, field: str, where: str) -> tuple[str, Any]:
    """A recorded tool call's function name and arguments; a call without a name is an error naming ``field``."""
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise MetrobenchError(f"{where}: field {field}.function.name: a tool call needs its function's name "
                              f"(got {name!r})")
    return name, function.get("arguments")


def clean_messages(messages: list[dict[str, Any]], where: str = "trace") -> list[dict[str, Any]]:
    """OpenAI-format messages: content always a string, arguments JSON strings, no reasoning.

    ``where`` (the file and case) begins the one-line error for a message that is not an object
    or a tool call without a function name (a foreign transcript's).
    """
    out = []
    for index, m in enumerate(messages):
        if not isinstance(m, dict):
            raise MetrobenchError(f"{where}: field messages[{index}]: each message must be an object")
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            continue
        item: dict[str, Any] = {"role": role}
        if role == "tool":  # before its content, as the runner records it (and the examples were written)
            item["tool_call_id"] = m.get("tool_call_id") or ""
        item["content"] = m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise MetrobenchError(f"{where}: field messages[{index}].tool_calls: a list of tool calls, "
                                      f"not {type(calls).__name__}")
            item["tool_calls"] = []
            for i, c in enumerate(calls):
                name, arguments = _call_field(c, f"messages[{index}].tool_calls[{i}]", where)
                item["tool_calls"].append({"id": c.get("id") or f"call_{i}", "type": "function",
                                           "function": {"name": name, "arguments": canonical_arguments(
                                               arguments if arguments is not None else {})}})
        out.append(item)
    return out


def check_no_holdout(examples: list[Example], partitions: dict[str, str]) -> None:
    """Refuse a training set holding any case that is not in the train partition."""
    leaked = sorted(e.case_id for e in examples if partitions.get(e.case_id) != "train")
    if leaked:
        raise HeldOutLeak(f"{len(leaked)} held-out or unknown cases in the training set: {', '.join(leaked[:5])}")


def _accepted(content: Any) -> bool:
    """Whether a tool answer is the kiosk's acceptance of a submission (``{"accepted": true, ...}``)."""
    try:
        body = json.loads(content) if isinstance(content, str) else content
    except json.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("accepted") is True


def turn_endings(messages: list[dict[str, Any]]) -> list[bool | None]:
    """Per user turn: whether its last submission was accepted; ``None`` where it has no submission.

    A tool message answers the calls of the assistant message before it, in order.
    """
    endings: list[bool | None] = []
    pending: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "user":
            endings.append(None)
        elif role == "assistant":
            pending = [(c.get("function") or {}).get("name") or "" for c in m.get("tool_calls") or []]
        elif role == "tool" and pending and pending.pop(0) == SUBMIT_TOOL and endings:
            endings[-1] = _accepted(m.get("content"))
    return endings


def unfinished(messages: list[dict[str, Any]]) -> str | None:
    """``no_submission`` or ``refused`` for a conversation that does not end every turn accepted."""
    endings = turn_endings(messages)
    if not endings or any(e is None for e in endings):
        return "no_submission"
    return None if all(endings) else "refused"


@dataclass
class KeptTraces:
    """The kept examples and, per (teacher, category), the traces seen, kept and dropped by reason."""

    examples: list[Example]
    counts: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)

    def note(self, teacher: str, case_id: str, outcome: str) -> None:
        self.counts.setdefault((teacher, case_id.split("-")[1]), Counter())[outcome] += 1

    def dropped(self, reason: str) -> int:
        return sum(c[reason] for c in self.counts.values())

    def report(self) -> list[str]:
        """One line per teacher and category (then the teacher's total): traces, kept, drops by reason."""
        lines = []
        for teacher in dict.fromkeys(t for t, _ in self.counts):
            rows = [(cat, self.counts[(teacher, cat)]) for cat in CATEGORIES if (teacher, cat) in self.counts]
            total: Counter[str] = sum((c for _, c in rows), Counter())
            for cat, c in [*rows, ("all", total)]:
                drops = ", ".join(f"{r} {c[r]}" for r in DROP_REASONS if c[r])
                lines.append(f"  {teacher} {cat}: {c['traces']} traces, {c['kept']} kept"
                             + (f"; dropped: {drops}" if drops else ""))
        lines += [f"  ({reason}: {why})" for reason, why in DROP_HELP.items() if self.dropped(reason)]
        return lines


def _screen(record: CaseRecord, t1: float | None, min_tier1: float) -> str | None:
    if record.error is not None:
        return "run_error"
    if t1 is None:
        return "unscored"
    return "below_threshold" if t1 < min_tier1 else None


def select_traces(bench: Benchmark, runs_dir: Path, tier1: dict[str, dict[str, float]],
                  teachers: list[str], partitions: dict[str, str], *, min_tier1: float = 90.0,
                  systems: tuple[str, ...] = SYSTEMS) -> KeptTraces:
    """The finished, good-enough train traces, best teacher per case, in (system, case-file) order."""
    selection = KeptTraces([])
    candidates: list[Example] = []
    for teacher in teachers:
        scores = tier1.get(teacher)
        if scores is None:
            raise MetrobenchError(f"no scores for teacher {teacher!r}")
        for system in systems:
            path = Path(layout.run_file(str(runs_dir), teacher, system))
            if not path.is_file():
                raise MetrobenchError(f"{path}: no run of teacher {teacher} on {system}")
            records, doubled = latest_records(read_run(path).records)
            for case_id in doubled:  # the record its Tier 1 was scored from: the same function chose it
                print(f"metrobench: warning: {path}: case {case_id} appears more than once: its last record "
                      "is used, as it was scored", file=sys.stderr)
            for record in records.values():
                if partitions.get(record.case_id) != "train":
                    continue
                selection.note(teacher, record.case_id, "traces")
                t1 = scores.get(record.case_id)
                reason = _screen(record, t1, min_tier1)
                if reason is None and not record.messages:
                    reason = "no_messages"
                if reason is None:
                    messages = clean_messages(record.messages, f"{path}: case {record.case_id}")
                    reason = unfinished(messages)
                if reason is not None:
                    selection.note(teacher, record.case_id, reason)
                    continue
                candidates.append(Example(record.case_id, teacher, float(t1), messages))
    best: dict[str, Example] = {}
    for example in candidates:  # teachers in order of preference: a tie keeps the first
        current = best.get(example.case_id)
        if current is None or example.tier1 > current.tier1:
            best[example.case_id] = example
    for example in candidates:
        won = best[example.case_id] is example
        selection.note(example.teacher, example.case_id, "kept" if won else "outranked")
    order = {c.id: (SYSTEMS.index(s), i) for s in systems for i, c in enumerate(bench.cases(s))}
    selection.examples = sorted(best.values(), key=lambda e: order[e.case_id])
    check_no_holdout(selection.examples, partitions)
    return selection


def build_trainset(bench: Benchmark, runs_dir: Path, tier1: dict[str, dict[str, float]],
                   teachers: list[str], partitions: dict[str, str], *, min_tier1: float = 90.0,
                   systems: tuple[str, ...] = SYSTEMS) -> list[Example]:
    """The examples of :func:`select_traces`."""
    return select_traces(bench, runs_dir, tier1, teachers, partitions, min_tier1=min_tier1,
                         systems=systems).examples


def composition(examples: list[Example], partitions: dict[str, str], teachers: list[str],
                systems: tuple[str, ...] = SYSTEMS) -> list[dict[str, Any]]:
    """Table 7: per category kept / train-partition cases / coverage, counts per teacher, mean Tier 1."""
    prefixes = {CASE_PREFIX[s] for s in systems}
    train = Counter(cid.split("-")[1] for cid, p in partitions.items()
                    if p == "train" and cid.split("-")[0] in prefixes)
    kept: dict[str, list[Example]] = defaultdict(list)
    for e in examples:
        kept[e.case_id.split("-")[1]].append(e)
    rows = []
    for cat in [*CATEGORIES, "all"]:
        group = examples if cat == "all" else kept.get(cat, [])
        n_train = sum(train.values()) if cat == "all" else train.get(cat, 0)
        row: dict[str, Any] = {"category": cat, "kept": len(group), "train_cases": n_train,
                               "coverage_pct": round(100 * len(group) / n_train, 1) if n_train else 0.0,
                               "mean_tier1": round(sum(e.tier1 for e in group) / len(group), 2) if group else ""}
        for teacher in teachers:
            row[f"from_{teacher}"] = sum(1 for e in group if e.teacher == teacher)
        rows.append(row)
    return rows


def write_trainset(examples: list[Example], out: Path, rows: list[dict[str, Any]], table: Path) -> None:
    write_text(out, "".join(e.to_json() + "\n" for e in examples))
    with atomic_open(table, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def tier1_by_model(scores_dir: Path, models: list[str]) -> dict[str, dict[str, float]]:
    """model -> case id -> Tier 1 percent, from the Parquet scores."""
    from metrobench.scoring.store import read_scores, totals_from_table

    totals = totals_from_table(read_scores(scores_dir, models=models))
    return {m: {c.case_id: c.tier1_pct for cases in by_system.values() for c in cases}
            for m, by_system in totals.items()}

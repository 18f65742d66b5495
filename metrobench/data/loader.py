"""Loading the system files and case files into validated models.

Every failure becomes one :class:`~metrobench.errors.DataError` naming the file,
the case (or station, line, edge) and the field, e.g.::

    cases/marta_cases.json: case MARTA-A-003: field events.0.station_id:
    unknown station id 'MARTA-XX' (not in data/systems/marta/stations.json)

Loaded systems are cached per (root, system): they are immutable after loading,
so sessions of many cases (also concurrent ones) share one copy safely.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from metrobench.data.models import (
    Case,
    EventsFile,
    FareRules,
    Framebook,
    FramebookFile,
    Graph,
    Line,
    Policy,
    PolicyFile,
    Scenario,
    Station,
    StationSelected,
    TestPairs,
)
from metrobench.data.root import CASE_PREFIX, SYSTEMS, resolve_root
from metrobench.errors import DataError, not_utf8
from metrobench.vocabulary import WHOLE

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, eq=False)
class SystemData:
    """Everything the tools need about one metro system, validated."""

    name: str
    directory: Path
    stations: dict[str, Station]            # file order preserved (name resolution depends on it)
    lines: dict[str, Line]                  # file order preserved
    graph: Graph
    fares: FareRules
    framebook: Framebook
    policies: list[Policy]
    fares_raw: dict[str, Any] = field(repr=False)  # as written; prompts print it verbatim
    framebook_raw: dict[str, Any] = field(repr=False)  # as written; the prompt and the judge's facts quote it
    stations_raw: dict[str, dict[str, Any]] = field(repr=False)  # as written; station_info returns it

    @property
    def line_alias(self) -> dict[str, str]:
        """Lower-cased line id and full line name -> line id (as the reference resolves lines)."""
        alias: dict[str, str] = {}
        for line in self.lines.values():
            alias[line.id.lower()] = line.id
            if line.name:
                alias[line.name.lower()] = line.id
        return alias


def _read(path: Path, parse, kind: str, error: type[Exception], where) -> Any:
    """Parse a file, turning a missing file or a syntax error into one DataError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(str(path), "file not found") from None
    except IsADirectoryError:
        raise DataError(str(path), "is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise DataError(str(path), not_utf8(exc)) from None
    except OSError as exc:
        raise DataError(str(path), exc.strerror or str(exc)) from None
    try:
        return parse(text)
    except RecursionError:
        raise DataError(str(path), f"invalid {kind}: nested too deeply") from None
    except error as exc:
        raise DataError(str(path), f"invalid {kind}{where(exc)}") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file; a syntax error names its line and column."""
    return _read(path, json.loads, "JSON", json.JSONDecodeError,
                 lambda e: f" at line {e.lineno} column {e.colno}: {e.msg}")


#: libyaml's parser where PyYAML was built with it (the same safe constructor, about ten times
#: faster: the framebooks and scenarios are most of a stage's start-up), else the pure-Python one.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader


#: The most values a config file may hold once its YAML aliases are expanded. An alias is one
#: node to the parser but every use of it is walked by validation: nine aliases of nine nested a
#: few levels deep make 10^8 values from a few hundred bytes (the "billion laughs").
CONFIG_MAX_VALUES = 1_000_000


def read_yaml(path: Path, max_values: int | None = None) -> Any:
    """Parse a YAML file; with ``max_values``, one that expands to more values is refused."""
    value = _read(path, _safe_load, "YAML", yaml.YAMLError, _yaml_where)
    if max_values is not None and _more_values_than(value, max_values):
        raise DataError(str(path), f"more than {max_values:,} values once its YAML aliases (*name) are "
                                   "expanded: not a config (a nest of aliases?)")
    return value


def _more_values_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds more than ``limit`` values, aliases counted at every use (stops early)."""
    seen, stack = 0, [value]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _yaml_where(exc: Exception) -> str:
    """A YAML syntax error on one line: what went wrong and where (PyYAML's text spans lines)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f" at line {mark.line + 1} column {mark.column + 1}: {problem}"
    return ": " + " ".join(str(exc).split())


def _loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors(include_url=False)[0]
    more = exc.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return _loc(err["loc"]), f"{err['msg']}{suffix}"


def validate(model: type[M], raw: Any, path: Path, *, case_id: str | None = None,
             prefix: str = "") -> M:
    """Validate ``raw`` against ``model``, raising a DataError that names the field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise DataError(str(path), msg, case_id=case_id, field=prefix + loc) from None


def _validate_list(model: type[M], raw: Any, path: Path, key: str) -> list[M]:
    """Validate a list of objects, naming the offending item by its ``key`` when it has one."""
    if not isinstance(raw, list):
        raise DataError(str(path), f"expected a JSON list, got {type(raw).__name__}")
    items = []
    for index, item in enumerate(raw):
        label = item.get(key) if isinstance(item, dict) else None
        try:
            items.append(model.model_validate(item))
        except ValidationError as exc:
            loc, msg = _first_error(exc)
            where = f"[{index}]" + (f" ({key} {label})" if label else "")
            raise DataError(str(path), msg, field=f"{where}.{loc}") from None
    return items


@cache
def _load_system_cached(root: Path, name: str) -> SystemData:
    directory = root / "data" / "systems" / name
    if not directory.is_dir():
        raise DataError(str(directory), f"unknown system {name!r}; expected one of {', '.join(SYSTEMS)}")

    stations_path = directory / "stations.json"
    stations_json = read_json(stations_path)
    stations = _validate_list(Station, stations_json, stations_path, "id")
    station_map: dict[str, Station] = {}
    for station in stations:
        if station.id in station_map:
            raise DataError(str(stations_path), f"duplicate station id {station.id!r}", field="id")
        station_map[station.id] = station

    lines_path = directory / "lines.json"
    lines = _validate_list(Line, read_json(lines_path), lines_path, "id")
    line_map = {line.id: line for line in lines}
    for line in lines:
        for sid in line.stations:
            if sid not in station_map:
                raise DataError(str(lines_path), f"unknown station id {sid!r}",
                                field=f"(line {line.id}).stations")

    graph_path = directory / "graph.json"
    graph = validate(Graph, read_json(graph_path), graph_path)
    for index, edge in enumerate(graph.edges):
        for end in (edge.from_, edge.to):
            if end not in station_map:
                raise DataError(str(graph_path), f"unknown station id {end!r}", field=f"edges[{index}]")
        if edge.line not in line_map:
            raise DataError(str(graph_path), f"unknown line id {edge.line!r}", field=f"edges[{index}].line")

    fares_path = directory / "fares.json"
    fares_raw = read_json(fares_path)
    fares = validate(FareRules, fares_raw, fares_path)
    if fares.model == "distance" and not fares.fare_brackets:
        raise DataError(str(fares_path), "a distance fare model needs fare_brackets", field="fare_brackets")

    framebook_path = directory / "framebook.yaml"
    framebook_file = read_yaml(framebook_path)
    framebook = validate(FramebookFile, framebook_file, framebook_path).framebook

    policies_path = directory / "policies.json"
    policies = validate(PolicyFile, read_json(policies_path), policies_path).policies

    # Generator inputs: validated for shape only (the harness never reads them).
    for fname, model in (("events.yaml", EventsFile), ("test_pairs.json", TestPairs)):
        path = directory / fname
        if path.exists():
            validate(model, read_yaml(path) if fname.endswith(".yaml") else read_json(path), path)
    scenarios_path = directory / "scenarios.yaml"
    if scenarios_path.exists():
        _validate_list(Scenario, read_yaml(scenarios_path), scenarios_path, "id")

    return SystemData(
        name=name,
        directory=directory,
        stations=station_map,
        lines=line_map,
        graph=graph,
        fares=fares,
        framebook=framebook,
        policies=policies,
        fares_raw=fares_raw,
        framebook_raw=framebook_file["framebook"],
        stations_raw={item["id"]: item for item in stations_json},
    )


def load_system(root: Path | str, name: str) -> SystemData:
    """Load and validate one system's files (cached; the result is shared and read-only)."""
    return _load_system_cached(Path(root).resolve(), name)


def case_file(root: Path, system: str, partition: str = WHOLE) -> Path:
    """Path of a system's canonical case file (or one of the committed split slices)."""
    suffix = {WHOLE: "", "train": "_train_split75", "holdout": "_holdout_split75"}[partition]
    return root / "cases" / f"{system}_cases{suffix}.json"


def load_cases(root: Path | str, system: str, *, path: Path | None = None) -> list[Case]:
    """Load one system's cases, validated and cross-checked against the system's stations.

    Checks, each failing with the file, case id and field named: JSON syntax, the
    case schema, duplicate ids, a case of another system, and station ids that
    the system does not have (in events and ground-truth paths).
    """
    root = Path(root).resolve()
    path = path or case_file(root, system)
    system_data = load_system(root, system)
    raw = read_json(path)
    if not isinstance(raw, list):
        raise DataError(str(path), f"expected a JSON list of cases, got {type(raw).__name__}")
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        case_id = item.get("id") if isinstance(item, dict) else None
        label = str(case_id) if case_id else f"#{index}"
        if not isinstance(item, dict):
            raise DataError(str(path), "expected a JSON object", case_id=label)
        case = validate(Case, item, path, case_id=label)
        case._raw = item
        if case.id in seen:
            raise DataError(str(path), f"duplicate case id (also at position {seen[case.id]})",
                            case_id=case.id, field="id")
        seen[case.id] = index
        if case.system != system:
            raise DataError(str(path), f"case of system {case.system!r} in the {system!r} case file",
                            case_id=case.id, field="system")
        if case.id.split("-")[0] != CASE_PREFIX[system]:
            raise DataError(str(path), f"id prefix should be {CASE_PREFIX[system]!r}",
                            case_id=case.id, field="id")
        _check_station_ids(case, system_data, path)
        cases.append(case)
    return cases


def _check_station_ids(case: Case, system: SystemData, path: Path) -> None:
    known = system.stations
    stations_file = f"data/systems/{system.name}/stations.json"

    def fail(sid: str, field: str) -> None:
        raise DataError(str(path), f"unknown station id {sid!r} (not in {stations_file})",
                        case_id=case.id, field=field)

    for t, turn in enumerate(case.multi_turn_events or []):
        for i, event in enumerate(turn):
            if isinstance(event, StationSelected) and event.station_id and event.station_id not in known:
                fail(event.station_id, f"multi_turn_events[{t}][{i}].station_id")
    for i, event in enumerate(case.events):
        if isinstance(event, StationSelected) and event.station_id and event.station_id not in known:
            fail(event.station_id, f"events[{i}].station_id")
    if case.ground_truth.route is not None:
        for i, sid in enumerate(case.ground_truth.route.path):
            if sid not in known:
                fail(sid, f"ground_truth.route.path[{i}]")
    # Disruption segments are not checked: the published data has one that names a
    # station the system lacks (BART-C-007, 'BART-NCON'); it is data, not a typo of ours.


@dataclass
class Benchmark:
    """A benchmark root with lazy, cached access to systems and cases."""

    root: Path
    _cases: dict[str, list[Case]] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, explicit: str | Path | None = None) -> "Benchmark":
        return cls(resolve_root(explicit).resolve())

    def system(self, name: str) -> SystemData:
        return load_system(self.root, name)

    def cases(self, system: str) -> list[Case]:
        if system not in self._cases:
            self._cases[system] = load_cases(self.root, system)
        return self._cases[system]

    def find_case(self, case_id: str) -> Case | None:
        """The case with this id, or ``None`` when the benchmark has none."""
        from metrobench.data.root import SYSTEM_BY_PREFIX

        system = SYSTEM_BY_PREFIX.get(case_id.split("-")[0])
        if system is None:
            return None
        return next((case for case in self.cases(system) if case.id == case_id), None)

    def case(self, case_id: str) -> Case:
        from metrobench.data.root import SYSTEM_BY_PREFIX

        case = self.find_case(case_id)
        if case is not None:
            return case
        system = SYSTEM_BY_PREFIX.get(case_id.split("-")[0])
        if system is None:
            raise DataError(str(self.root / "cases"), "no system has this id prefix", case_id=case_id)
        raise DataError(str(case_file(self.root, system)), "no such case", case_id=case_id)

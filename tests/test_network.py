"""Routing: ground-truth routes, deterministic ties, restrictions and closures."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from metrobench.data import SYSTEMS
from metrobench.data.models import StationSelected
from metrobench.kiosk.network import NoPathError, RoutingError, network_for


def _routes(bench):
    for system in SYSTEMS:
        for case in bench.cases(system):
            if case.ground_truth.route is not None:
                yield system, case


def test_every_ground_truth_route_is_graph_valid(bench):
    checked = 0
    for system, case in _routes(bench):
        assert network_for(bench.system(system)).is_valid_path(case.ground_truth.route.path), case.id
        checked += 1
    assert checked == 775


def test_route_planner_reproduces_ground_truth_between_case_stations(bench):
    """For every routing case, planning between the case's own origin and destination
    station ids returns the ground-truth path, distance and time."""
    checked = 0
    for system, case in _routes(bench):
        if case.category in "CK":  # their GT route may be the post-disruption alternative
            continue
        net = network_for(bench.system(system))
        picks = {e.field: e for e in case.events if isinstance(e, StationSelected)}
        if {"origin", "destination"} <= picks.keys() and picks["origin"].station_id \
                and picks["destination"].station_id:
            origin, destination = picks["origin"].station_id, picks["destination"].station_id
        else:
            origin, destination = case.ground_truth.route.path[0], case.ground_truth.route.path[-1]
        route = net.shortest_path(origin, destination)
        gt = case.ground_truth.route
        assert list(route.path) == gt.path, case.id
        assert (route.transfers, route.distance_miles, route.estimated_minutes) == (
            gt.transfers, gt.distance_miles, gt.estimated_minutes), case.id
        checked += 1
    assert checked > 550


def test_equal_time_station_paths_decided_as_reference(bench):
    """Distinct station paths of equal time: the reference's float arithmetic decides."""
    route = network_for(bench.system("cta")).shortest_path("CTA-HOW", "CTA-BLM")
    assert list(route.path) == ["CTA-HOW", "CTA-WIL", "CTA-BLM"]


@pytest.mark.parametrize("system,origin,destination,line", [
    ("marta", "Airport", "Five Points", "red"),
    ("marta", "Airport", "Midtown", "red"),
    ("bart", "Embarcadero", "Daly City", "yellow"),
    ("bart", "Embarcadero", "San Francisco Intl Airport", "yellow"),
])
def test_shared_track_resolves_to_published_realisation(bench, system, origin, destination, line):
    route = network_for(bench.system(system)).shortest_path(origin, destination)
    assert route.line_sequence == (line,)
    assert {stop["line"] for stop in route.stops} == {line}


@pytest.mark.slow
def test_line_choice_does_not_depend_on_hash_seed(root):
    script = (
        "import json,sys\n"
        "from metrobench.data import Benchmark\n"
        "from metrobench.kiosk.network import network_for\n"
        f"b = Benchmark({str(root)!r})\n"
        "out = {}\n"
        "for s, o, d in [('marta','Airport','Five Points'), ('bart','Embarcadero','Daly City'),"
        " ('cta','Clark/Lake','Howard'), ('doha','Msheireb','Al Wakra')]:\n"
        "    try:\n"
        "        r = network_for(b.system(s)).shortest_path(o, d)\n"
        "        out[s] = [st['line'] for st in r.stops]\n"
        "    except Exception as e:\n"
        "        out[s] = str(e)\n"
        "print(json.dumps(out))\n"
    )
    seen = set()
    for seed in ("0", "1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                             check=True).stdout
        seen.add(out)
    assert len(seen) == 1


def test_name_resolution_rules(bench):
    net = network_for(bench.system("beijing"))
    full = next(s for s in bench.system("beijing").stations.values() if "(" in s.name)
    base, paren = full.name.split("(")[0].strip(), full.name.split("(")[1].rstrip(")").strip()
    assert net.resolve(full.name.upper()) == full.id
    assert net.resolve(f"  {paren.lower()} ") == net.resolve(paren)
    assert net.resolve(base) == net.resolve(base.lower())
    with pytest.raises(RoutingError, match=r"^Unknown station: 'Atlantis'$"):
        net.resolve("Atlantis")
    with pytest.raises(RoutingError):
        net.resolve(full.id.lower())  # ids are exact


def test_base_name_of_an_earlier_station_wins(bench):
    """Reference quirk kept: 'Belmont' is the base name of 'Belmont (Blue)', listed before
    the station named exactly 'Belmont', so it resolves to the Blue Line station."""
    assert network_for(bench.system("cta")).resolve("Belmont") == "CTA-BEL"


def test_same_station_is_a_one_stop_route(bench):
    route = network_for(bench.system("marta")).shortest_path("Airport", "MARTA-AP")
    assert route.transfers == 0 and route.line_sequence == () and route.stops[0]["line"] is None


def test_restrictions(bench):
    net = network_for(bench.system("marta"))
    plain = net.shortest_path("Airport", "Five Points")
    with pytest.raises(RoutingError, match=r"^Origin station 'Airport' is closed by disruption$"):
        net.shortest_path_with_restrictions("Airport", "Five Points", [{"station": "MARTA-AP", "restriction": "closed"}])
    with pytest.raises(RoutingError, match=r"^Destination station 'Five Points' is skip by disruption$"):
        net.shortest_path_with_restrictions("Airport", "Five Points", [{"station": "Five Points", "restriction": "skip"}])
    # skipping an intermediate station keeps the same path (trains pass through)
    skipped = net.shortest_path_with_restrictions("Airport", "Five Points", [{"station": "College Park", "restriction": "skip"}])
    assert skipped.path == plain.path
    # closing it cuts the only line south: no path
    with pytest.raises(NoPathError, match="No path between 'Airport' and 'Five Points' with current restrictions"):
        net.shortest_path_with_restrictions("Airport", "Five Points", [{"station": "College Park", "restriction": "closed"}])
    # Five Points is MARTA's only interchange: a transfer ban there leaves no route east,
    # while boarding and alighting there stay allowed
    through = net.shortest_path("Airport", "Edgewood/Candler Park")
    assert [s["station_id"] for s in through.stops if s["is_transfer"]] == ["MARTA-FP"]
    ban = [{"station": "MARTA-FP", "restriction": "no_transfer"}]
    with pytest.raises(NoPathError):
        net.shortest_path_with_restrictions("Airport", "Edgewood/Candler Park", ban)
    assert net.shortest_path_with_restrictions("Airport", "Five Points", ban).path == plain.path


def test_segment_and_line_closures(bench):
    net = network_for(bench.system("bart"))
    tube = ("BART-WOAK", "BART-EMBR")
    plain = net.shortest_path("12th St Oakland", "Embarcadero")
    assert list(plain.path[-2:]) == list(tube)
    with pytest.raises(NoPathError):
        net.shortest_path_with_restrictions("12th St Oakland", "Embarcadero", segment_closures=[tube])
    whole = net.expand_line_closures([{"line": "oac"}])
    assert whole and all(pair in [("BART-COLS", "BART-OAKL"), ("BART-OAKL", "BART-COLS")] for pair in whole)
    with pytest.raises(RoutingError, match="requires both from_station and to_station"):
        net.expand_line_closures([{"line": "red", "from_station": "Embarcadero"}])
    with pytest.raises(RoutingError, match=r"^Unknown line: purple$"):
        net.expand_line_closures([{"line": "purple"}])
    with pytest.raises(RoutingError, match="are not on line 'oac'"):
        net.expand_line_closures([{"line": "oac", "from_station": "Embarcadero", "to_station": "Daly City"}])
    loop = network_for(bench.system("beijing"))
    assert loop.is_loop_line("2") and loop.line_terminals("2") == []
    with pytest.raises(RoutingError, match="loop line '2' is ambiguous"):
        loop.expand_line_closures([{"line": "2", "from_station": loop.system.lines["2"].stations[0],
                                    "to_station": loop.system.lines["2"].stations[3]}])

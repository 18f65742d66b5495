"""Routing on networkx (metrobench.kiosk.graph): tie-breaks, and every station pair pinned.

The tie cases below are what networkx 3.6's bidirectional Dijkstra returns for
the same edges added in the same order: a different search (or an adjacency not
in insertion order) could return the other path of equal weight. The digests pin
the route of every ordered station pair of the four smaller systems (16,530
queries), taken with the hand-written copy of that search the project used
before it routed on networkx again; all 207,534 pairs of the six systems were
identical at the switch. ``tests/test_network.py`` checks every ground-truth
route of the benchmark.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from metrobench.kiosk.graph import DiGraph, NoPath, bidirectional_dijkstra
from metrobench.kiosk.network import network_for


def _path(edges: list[tuple[str, str, float]], source: str = "s", target: str = "t") -> list[str]:
    graph = DiGraph()
    for a, b, weight in edges:
        graph.add_edge(a, b, weight=weight)
    return bidirectional_dijkstra(graph, source, target)


@pytest.mark.parametrize(("edges", "expected"), [
    # Equal two-edge paths: the backward side settles the meeting node, so the order of t's
    # predecessors decides, not s's successors.
    ([("s", "a", 1), ("s", "b", 1), ("a", "t", 1), ("b", "t", 1)], ["s", "a", "t"]),
    ([("s", "b", 1), ("s", "a", 1), ("a", "t", 1), ("b", "t", 1)], ["s", "a", "t"]),
    ([("s", "a", 1), ("s", "b", 1), ("b", "t", 1), ("a", "t", 1)], ["s", "b", "t"]),
    # Equal three-edge paths: insertion order throughout.
    ([("s", "a", 1), ("a", "m", 1), ("m", "t", 1), ("s", "b", 1), ("b", "n", 1), ("n", "t", 1)],
     ["s", "a", "m", "t"]),
    ([("s", "b", 1), ("b", "n", 1), ("n", "t", 1), ("s", "a", 1), ("a", "m", 1), ("m", "t", 1)],
     ["s", "b", "n", "t"]),
    # Float sums decide: 0.1 + 0.2 > 0.3.
    ([("s", "a", 0.1), ("a", "b", 0.2), ("b", "t", 1), ("s", "c", 0.3), ("c", "t", 1)], ["s", "c", "t"]),
    # An edge added twice takes the new weight.
    ([("s", "a", 1), ("a", "t", 5), ("s", "t", 9), ("s", "t", 2)], ["s", "t"]),
])
def test_paths_and_ties_as_networkx_finds_them(edges, expected):
    assert _path(edges) == expected


def test_an_edge_added_twice_keeps_its_place_and_shares_one_attribute_dict():
    graph = DiGraph()
    graph.add_edge("s", "a", weight=1)
    graph.add_edge("s", "b", weight=1)
    graph.add_edge("s", "a", weight=3, kind="travel")
    assert list(graph["s"]) == ["a", "b"]
    assert graph["s"]["a"] == {"weight": 3, "kind": "travel"}
    assert graph.pred["a"]["s"] is graph["s"]["a"]
    assert graph.has_edge("s", "a") and not graph.has_edge("a", "s") and not graph.has_edge("x", "s")
    assert "b" in graph and "x" not in graph


def test_no_path_and_the_trivial_path():
    with pytest.raises(NoPath):
        _path([("s", "a", 1), ("t", "a", 1)])
    assert _path([("s", "a", 1)], "s", "s") == ["s"]


#: sha256 (16 hex digits) of every ordered pair's route as JSON, pairs in stations.json order.
PAIR_DIGESTS = {"marta": (1406, "1a95facf60147da3"), "doha": (1332, "5cb7dce125e69d05"),
                "bart": (2450, "9f4abb6a64214f1b"), "taipei": (11342, "9c0948841b6f62ad")}


@pytest.mark.slow
@pytest.mark.parametrize("system", PAIR_DIGESTS)
def test_every_station_pair_routes_as_before_networkx_came_back(bench, system):
    net = network_for(bench.system(system))
    stations = list(bench.system(system).stations)
    digest, queries = hashlib.sha256(), 0
    for origin in stations:
        for destination in stations:
            if origin != destination:
                route = net.shortest_path(origin, destination)
                digest.update(json.dumps(dataclasses.asdict(route)).encode())
                queries += 1
    assert (queries, digest.hexdigest()[:16]) == PAIR_DIGESTS[system]

"""The route search's own digraph and bidirectional Dijkstra (metrobench.kiosk.graph).

Every expected path below is what networkx 3.6's ``bidirectional_dijkstra``
returns for the same edges added in the same order (taken with networkx before
the project stopped depending on it): the ties are where the two could differ.
``tests/test_network.py`` checks every ground-truth route of the benchmark.
"""

from __future__ import annotations

import pytest

from metrobench.kiosk.graph import DiGraph, NoPath, bidirectional_dijkstra


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

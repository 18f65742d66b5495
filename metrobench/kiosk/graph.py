"""The weighted digraph routes are found on, and the search: networkx's, as in the reference.

The reference builds its expanded line graph as a networkx ``DiGraph`` and asks
``networkx.shortest_path(G, enter, exit, weight="weight")``, which for one
source and one target runs networkx's bidirectional Dijkstra (reference spec
§3). Between alternatives of equal time the float sums and the order of
expansion (adjacency in insertion order) decide, and six ground-truth routes
depend on that (:mod:`metrobench.kiosk.network`). Routing here makes that same
call on a graph built in a fixed insertion order, so the routes are the
reference's by construction.

Contract: :data:`DiGraph` is the graph type (an edge added twice keeps its
place and takes the new attributes); :func:`bidirectional_dijkstra` returns the
nodes of a shortest path by the edges' ``weight`` and raises :data:`NoPath`
when none exists. ``tests/test_graph.py`` pins the tie-breaks and every
ordered station pair's route; ``tests/test_network.py`` checks every
ground-truth route of the benchmark.
"""

from __future__ import annotations

from collections.abc import Hashable

import networkx as nx

Node = Hashable

#: The graph type the expanded line graph is built as.
DiGraph = nx.DiGraph
#: Raised when no directed path joins the two nodes.
NoPath = nx.NetworkXNoPath


def bidirectional_dijkstra(graph: DiGraph, source: Node, target: Node) -> list[Node]:
    """The nodes of a shortest ``source`` -> ``target`` path by the edges' ``weight``."""
    return nx.shortest_path(graph, source, target, weight="weight")

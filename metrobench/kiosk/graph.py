"""A small weighted digraph and the bidirectional Dijkstra that routes are found with.

Routes have to come out as the reference's networkx search finds them: between
alternatives of equal time the float sums and the order of expansion decide,
and six ground-truth routes depend on that (:mod:`metrobench.kiosk.network`).
So the search below takes the steps of networkx 3's ``bidirectional_dijkstra``
one for one: the two directions alternate, forward first; each side's heap
breaks distance ties by push order; a node is relaxed only on a strictly
shorter distance; the meeting node changes only on a strictly shorter total;
the search ends when a node is settled from both sides. Adjacency is kept in
insertion order, as networkx keeps it, and an edge added twice keeps its first
position and takes the new attributes.

Why not networkx itself: importing it (0.25 s) cost each ``rule-agent`` and
``score`` process more than routing all of a system's cases, and the workflow
runs one such process per system (README, Benchmarks). ``tests/test_network.py``
checks every ground-truth route of the benchmark and both line-rank facts.
"""

from __future__ import annotations

from collections.abc import Hashable
from heapq import heappop, heappush
from itertools import count
from typing import Any

Node = Hashable


class NoPath(Exception):
    """No directed path joins the two nodes."""


class DiGraph:
    """Successor and predecessor maps sharing one attribute dict per edge."""

    __slots__ = ("succ", "pred")

    def __init__(self) -> None:
        self.succ: dict[Node, dict[Node, dict[str, Any]]] = {}
        self.pred: dict[Node, dict[Node, dict[str, Any]]] = {}

    def add_edge(self, u: Node, v: Node, **attrs: Any) -> None:
        for node in (u, v):
            if node not in self.succ:
                self.succ[node] = {}
                self.pred[node] = {}
        data = self.succ[u].get(v)
        if data is None:
            data = self.succ[u][v] = {}
            self.pred[v][u] = data
        data.update(attrs)

    def __contains__(self, node: Node) -> bool:
        return node in self.succ

    def __getitem__(self, node: Node) -> dict[Node, dict[str, Any]]:
        return self.succ[node]

    def has_edge(self, u: Node, v: Node) -> bool:
        return v in self.succ.get(u, ())


def bidirectional_dijkstra(graph: DiGraph, source: Node, target: Node) -> list[Node]:
    """The nodes of a shortest ``source`` -> ``target`` path by the edges' ``weight``."""
    if source == target:
        return [source]
    neighbours = (graph.succ, graph.pred)
    settled: tuple[dict[Node, float], dict[Node, float]] = ({}, {})
    reached: tuple[dict[Node, float], dict[Node, float]] = ({source: 0}, {target: 0})
    parent: tuple[dict[Node, Node | None], dict[Node, Node | None]] = ({source: None}, {target: None})
    heaps: tuple[list, list] = ([(0, 0, source)], [(0, 1, target)])
    pushes = count(2)
    best_total: float | None = None
    meet: Node | None = None
    side = 1
    while heaps[0] and heaps[1]:
        side = 1 - side
        dist, _, v = heappop(heaps[side])
        if v in settled[side]:
            continue
        settled[side][v] = dist
        if v in settled[1 - side]:
            return _joined(parent, meet)
        for w, data in neighbours[side][v].items():
            if w in settled[side]:
                continue        # weights are never negative here, so never shorter
            length = dist + data["weight"]
            if w not in reached[side] or length < reached[side][w]:
                reached[side][w] = length
                heappush(heaps[side], (length, next(pushes), w))
                parent[side][w] = v
                if w in reached[1 - side]:
                    total = length + reached[1 - side][w]
                    if best_total is None or total < best_total:
                        best_total, meet = total, w
    raise NoPath(f"no path from {source} to {target}")


def _joined(parent: tuple[dict[Node, Node | None], dict[Node, Node | None]], meet: Node) -> list[Node]:
    """Source ... meet from the forward parents, then meet's successors from the backward ones."""
    head: list[Node] = []
    node: Node | None = meet
    while node is not None:
        head.append(node)
        node = parent[0][node]
    head.reverse()
    node = parent[1][meet]
    while node is not None:
        head.append(node)
        node = parent[1][node]
    return head

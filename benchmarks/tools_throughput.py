"""route_planner + fare_calculator throughput on Beijing (414 stations), in process.

Each iteration plans a route between two stations and prices it, through
``call_tool`` exactly as the runner calls the tools (argument validation,
response models, ids). Two figures:

* cold: every origin–destination pair is new (the route cache is cleared), so
  each call runs the bidirectional Dijkstra;
* warm: pairs repeat, as across the cases of one benchmark run.

Usage: python benchmarks/tools_throughput.py [--data ROOT] [--pairs N]
"""

from __future__ import annotations

import argparse
import random
import time

from metrobench.data import Benchmark
from metrobench.kiosk.network import network_for
from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession


def run(session: ToolSession, pairs: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    for origin, destination in pairs:
        planned = call_tool(session, "route_planner", {"origin": origin, "destination": destination})
        fare = call_tool(session, "fare_calculator",
                         {"route_id": planned.body["route_id"], "passengers": {"adults": 1, "children": 1}})
        assert planned.ok and fare.ok
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--pairs", type=int, default=2000)
    args = parser.parse_args()
    bench = Benchmark.open(args.data)
    system = bench.system("beijing")
    names = [s.name for s in system.stations.values()]
    rng = random.Random(42)
    pairs = [tuple(rng.sample(names, 2)) for _ in range(args.pairs)]
    session = ToolSession(system)
    network = network_for(system)

    network._cached_route.cache_clear()
    cold = run(session, pairs)
    warm = run(session, pairs)
    print(f"beijing, {len(pairs)} route_planner+fare_calculator pairs")
    print(f"cold (every route computed): {len(pairs) / cold:8.0f} pairs/s  ({1000 * cold / len(pairs):.2f} ms/pair)")
    print(f"warm (routes cached):        {len(pairs) / warm:8.0f} pairs/s  ({1000 * warm / len(pairs):.2f} ms/pair)")


if __name__ == "__main__":
    main()

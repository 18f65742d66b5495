"""The serving kit's arithmetic and its one table: step budgets, speeds carried to full depth, CSV and markdown.

Pure functions, no server and no clock (``tests/test_gpu_kit_serve.py`` checks them):

* :func:`step_limit`: the seconds a step may take, or None when too little of the
  budget is left to start it (the step is then skipped and the table says so);
* :func:`time_at`: seconds at a model's full depth from seconds measured at a few
  depths of the same widths: the least-squares line ``a + b * layers`` through them
  when at least two depths were measured and it has a positive slope and a
  non-negative intercept, else the deepest measurement times ``layers / depth``
  (which counts the fixed part, the output head, once a layer: an upper bound on the
  time, so a lower bound on tokens a second, and the table says so);
* :func:`size_summary`: one size's measurements at its depths carried to full depth:
  memory by :func:`metrobench.footprint.server_memory.scaled_parts` from the deepest
  measured depth, speeds by :func:`time_at`;
* :func:`rows` and :func:`write_table`: every step (measured, scaled, side by side,
  failed or skipped) as one row of ``OUT/table.csv`` and ``OUT/table.md``.

The records are those ``serve.py`` writes into ``OUT/results.json`` (its docstring).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metrobench.footprint.server_memory import PARTS, Depth, scaled_parts

#: The table's columns: CSV name, markdown heading (None: CSV only).
COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("step", "step"), ("kind", None), ("model", "model (file type)"), ("quant", None), ("layers", "layers"),
    ("n_ctx", None), ("slots", "ctx × slots"), ("status", "status"), ("why", None),
    ("server_gib", "server GiB"), ("weights_gib", None), ("kv_gib", None), ("recurrent_gib", None),
    ("compute_gib", None), ("output_gib", None), ("parts", "weights / KV / RS / compute+out"),
    ("device_gib", "device GiB"), ("device_how", None),
    ("estimate_gib", "estimate GiB"), ("estimate_parts", "estimate weights / KV / RS / compute / CUDA"),
    ("prompt_tokens", None), ("cold_tps", "prompt tok/s cold"),
    ("warm_new_tokens", None), ("warm_tps", "warm: new tok/s"), ("warm_whole_tps", "warm: whole prompt tok/s"),
    ("decode_tokens", None), ("decode1_tps", "decode tok/s, 1 slot"), ("decode2_tps", "decode tok/s, 2 slots"),
    ("seconds", "s"), ("how", "how"),
    # the recorded memory table's columns (metrobench/footprint/measured.py, which holds the footprint's
    # estimate to them): on each size's full-depth row, in MiB; nvidia_smi_mib only from a GPU run
    ("size", None), ("server_reported_mib", None), ("nvidia_smi_mib", None), ("estimate_mib", None),
)


def step_limit(cap: float, left: float, minimum: float) -> float | None:
    """A step's time limit: its cap, cut to what is ``left`` of the budget; None when less than ``minimum`` is left."""
    if left < minimum:
        return None
    return min(cap, left)


def time_at(points: Iterable[tuple[int, float]], layers: int) -> tuple[float, str]:
    """Seconds at ``layers`` from ``(depth, seconds)`` measurements, and how (module docstring)."""
    pts = sorted((int(d), float(s)) for d, s in points if s is not None and s > 0)
    if not pts:
        raise ValueError("no measurement to scale")
    depths = {d for d, _ in pts}
    if any(d == layers for d in depths):
        measured = [s for d, s in pts if d == layers]
        return sum(measured) / len(measured), "measured at full depth"
    if len(depths) >= 2:
        n = len(pts)
        mean_d = sum(d for d, _ in pts) / n
        mean_s = sum(s for _, s in pts) / n
        spread = sum((d - mean_d) ** 2 for d, _ in pts)
        slope = sum((d - mean_d) * (s - mean_s) for d, s in pts) / spread
        intercept = mean_s - slope * mean_d
        if slope > 0 and intercept >= 0:
            where = ", ".join(str(d) for d in sorted(depths))
            return intercept + slope * layers, f"line through depths {where}, extrapolated to {layers}"
    deepest, seconds = pts[-1]
    return seconds * layers / deepest, f"x {layers}/{deepest} layers (a bound: tok/s at least this)"


def _rate(tokens: float | None, seconds: float | None) -> float | None:
    return tokens / seconds if tokens and seconds and seconds > 0 else None


def probe_seconds(record: dict[str, Any]) -> dict[str, float | None]:
    """The times a serve record holds, per unit the scaling carries: a cold prompt, a warm prompt's new
    tokens, one decoded token with one slot busy, one step of two slots (two tokens)."""
    p, w, d1, d2 = (record.get(k) or {} for k in ("cold", "warm", "decode1", "decode2"))
    step2 = None
    if d2.get("ms") and d2.get("tokens"):
        step2 = max(d2["ms"]) / 1000 / (sum(d2["tokens"]) / len(d2["tokens"]))
    return {"cold": p["ms"] / 1000 if p.get("ms") else None,
            "warm": w["ms"] / 1000 if w.get("ms") else None,
            "decode1": d1["ms"] / 1000 / d1["tokens"] if d1.get("ms") and d1.get("tokens") else None,
            "decode2": step2}


def speeds(record: dict[str, Any]) -> dict[str, float | None]:
    """Tokens a second of one serve record: cold prompt, warm prompt (its new tokens; the whole prompt), decode
    with one slot and with two."""
    t = probe_seconds(record)
    cold, warm = record.get("cold") or {}, record.get("warm") or {}
    return {"cold_tps": _rate(cold.get("tokens"), t["cold"]),
            "warm_tps": _rate(warm.get("processed"), t["warm"]),
            "warm_whole_tps": _rate((warm.get("cached") or 0) + (warm.get("processed") or 0), t["warm"]),
            "decode1_tps": _rate(1, t["decode1"]), "decode2_tps": _rate(2, t["decode2"])}


def _depth(record: dict[str, Any]) -> Depth:
    return Depth(record["layers"], record["kv_layers"], float(record.get("block_bytes") or 0))


def size_summary(size: str, info: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One size carried to its full depth from its serve records at smaller depths (module docstring).

    ``info``: the size's row (``full_layers``, ``full_kv_layers``, ``model``, ``quant`` ...); the
    records at full depth count as a check, not as an input, when any depth below it was measured."""
    full = info["full_layers"]
    below = [r for r in records if r["layers"] < full] or records
    if not below:
        return None
    deepest = max(below, key=lambda r: r["layers"])
    summary: dict[str, Any] = {"size": size, "model": info["model"], "quant": info["quant"], "layers": full,
                               "n_ctx": deepest["n_ctx"], "slots": deepest["parallel"],
                               "from_depths": sorted({r["layers"] for r in below}),
                               "estimate_gib": info.get("estimate_gib")}
    full_depth = Depth(full, info["full_kv_layers"], 0.0)
    if deepest.get("server_gib"):
        parts = scaled_parts({k: deepest["server_gib"][k] for k in PARTS}, _depth(deepest), full_depth)
        summary["server_gib"] = {**parts, "total": sum(parts.values())}
        if deepest.get("device_gib") is not None:
            summary["device_gib"] = deepest["device_gib"] + summary["server_gib"]["total"] \
                - deepest["server_gib"]["total"]
    how = [f"memory from {deepest['layers']} layers: blocks' weights x bytes, KV x {info['full_kv_layers']}/"
           f"{deepest['kv_layers']} attention blocks, recurrent state x {full - info['full_kv_layers']}/"
           f"{deepest['layers'] - deepest['kv_layers']}, compute and output as measured"]
    rates: dict[str, float | None] = {}
    whats: dict[str, list[str]] = {}
    names = {"cold": "cold prompt", "warm": "warm prompt", "decode1": "decode 1 slot", "decode2": "decode 2 slots"}
    for key, tokens in (("cold", None), ("warm", None), ("decode1", 1), ("decode2", 2)):
        points = [(r["layers"], probe_seconds(r)[key]) for r in below if probe_seconds(r)[key]]
        if not points:
            rates[key] = None
            continue
        seconds, what = time_at(points, full)
        whats.setdefault(what, []).append(names[key])
        if key == "cold":
            rates["cold_tps"] = _rate(deepest["cold"]["tokens"], seconds)
        elif key == "warm":
            warm = deepest["warm"]
            rates["warm_tps"] = _rate(warm["processed"], seconds)
            rates["warm_whole_tps"] = _rate(warm["processed"] + warm["cached"], seconds)
        else:
            rates[f"{key}_tps"] = _rate(tokens, seconds)
    summary.update({k: v for k, v in rates.items() if k.endswith("_tps")})
    how += [f"{', '.join(keys)}: {what}" for what, keys in whats.items()]
    summary["how"] = "; ".join(how)
    checks = [r for r in records if r["layers"] == full and r is not deepest]
    if checks:
        measured = checks[0]
        summary["check"] = {"measured": {**speeds(measured), "server_gib": measured.get("server_gib"),
                                         "device_gib": measured.get("device_gib")},
                            "scaled": {k: summary.get(k) for k in ("cold_tps", "warm_tps", "decode1_tps",
                                                                   "decode2_tps", "server_gib", "device_gib")}}
    return summary


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def _parts(gib: dict[str, float] | None, keys: tuple[str, ...]) -> str:
    if not gib:
        return "-"
    return " / ".join(_f(gib.get(k)) for k in keys)


def _memory_cells(server: dict[str, float] | None, estimate: dict[str, float] | None) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    if server:
        cells.update({"server_gib": server.get("total"), "weights_gib": server.get("weights"),
                      "kv_gib": server.get("kv"), "recurrent_gib": server.get("recurrent"),
                      "compute_gib": server.get("compute"), "output_gib": server.get("output")})
        combined = {**server, "compute": (server.get("compute") or 0) + (server.get("output") or 0)}
        cells["parts"] = _parts(combined, ("weights", "kv", "recurrent", "compute"))
    if estimate:
        cells["estimate_gib"] = estimate.get("total")
        cells["estimate_parts"] = _parts(estimate, ("weights", "kv", "recurrent", "compute", "cuda"))
    return cells


def _recorded_cells(size: str, row: dict[str, Any], on_gpu: bool) -> dict[str, Any]:
    """A full-depth row's cells in the recorded memory table's columns (GiB to MiB, rounded)."""
    def mib(gib: Any) -> float | None:
        return None if gib is None else round(float(gib) * 1024, 1)

    return {"size": size, "server_reported_mib": mib(row.get("server_gib")),
            "nvidia_smi_mib": mib(row.get("device_gib")) if on_gpu else None,
            "estimate_mib": mib(row.get("estimate_gib"))}


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: every step in order, then each size carried to full depth (``results['summaries']``)."""
    out = []
    for step in results["steps"]:
        record = step.get("record") or {}
        row: dict[str, Any] = {"step": step["step"], "kind": step["kind"], "status": step["status"],
                               "why": step.get("why", ""), "seconds": step.get("seconds")}
        if step["kind"] == "serve" and record:
            row.update({"model": record["model"], "quant": record["quant"], "layers": record["layers"],
                        "n_ctx": record["n_ctx"], "slots": record["parallel"],
                        "device_gib": record.get("device_gib"), "device_how": record.get("device_how"),
                        "prompt_tokens": (record.get("cold") or {}).get("tokens"),
                        "warm_new_tokens": (record.get("warm") or {}).get("processed"),
                        "decode_tokens": (record.get("decode1") or {}).get("tokens"), "how": "measured"})
            row.update(_memory_cells(record.get("server_gib"), record.get("estimate_gib")))
            row.update(speeds(record))
        elif step["kind"] == "side" and record:
            row.update({"model": record["model"], "quant": record["quant"], "layers": record["layers"],
                        "n_ctx": record["n_ctx"], "slots": record["parallel"], "how": record.get("how", "")})
        elif step["kind"] == "write" and record:
            row.update({"model": record.get("model"), "quant": record.get("quant"), "layers": record.get("layers"),
                        "how": record.get("how", "")})
        out.append(row)
        if step["kind"] == "side" and record:
            for busy in record.get("busy", []):
                out.append({"step": f"{step['step']} x{busy['servers']}", "kind": "side-by-side",
                            "model": record["model"], "quant": record["quant"], "layers": record["layers"],
                            "n_ctx": record["n_ctx"], "slots": f"{record['parallel']} x {busy['servers']} servers",
                            "status": "ok", "device_gib": busy.get("device_gib"), "device_how": busy.get("device_how"),
                            "decode2_tps": busy.get("tps"), "decode_tokens": busy.get("tokens_each"),
                            "how": f"{busy['servers']} server(s) of {record['servers']} loaded, every slot busy: "
                                   f"aggregate decode tok/s; device memory with {busy['servers']} loaded"})
    on_gpu = any(str((step.get("record") or {}).get("device_how", "")).startswith("nvidia-smi")
                 for step in results["steps"])
    for summary in results.get("summaries", []):
        row = {"step": f"{summary['size']} at {summary['layers']} layers", "kind": "scaled",
               "model": summary["model"], "quant": summary["quant"], "layers": summary["layers"],
               "n_ctx": summary["n_ctx"], "slots": summary["slots"], "status": "scaled",
               "device_gib": summary.get("device_gib"), "device_how": "measured less server + scaled server",
               "how": summary["how"]}
        row.update(_memory_cells(summary.get("server_gib"), summary.get("estimate_gib")))
        row.update({k: summary.get(k) for k in ("cold_tps", "warm_tps", "warm_whole_tps", "decode1_tps",
                                                "decode2_tps")})
        row.update(_recorded_cells(summary["size"], row, on_gpu))
        out.append(row)
        if summary.get("check"):
            measured = summary["check"]["measured"]
            check = {"step": f"{summary['size']} at {summary['layers']} layers, measured (check)", "kind": "check",
                     "model": summary["model"], "quant": summary["quant"], "layers": summary["layers"],
                     "status": "measured", "device_gib": measured.get("device_gib"),
                     "how": "the same size measured at full depth, against the row above"}
            check.update(_memory_cells(measured.get("server_gib"), None))
            check.update({k: measured.get(k) for k in ("cold_tps", "warm_tps", "warm_whole_tps", "decode1_tps",
                                                       "decode2_tps")})
            out.append(check)
    return out


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if key == "slots" and row.get("n_ctx"):
        return f"{row['n_ctx']:,} × {value}"
    if key == "model" and value:
        return f"{value} ({row.get('quant')})"
    if key == "status" and row.get("why"):
        return f"{value}: {row['why']}"
    if key.endswith("_tps"):
        return _f(value, 0 if value is not None and value >= 100 else 1)
    if key == "seconds":
        return _f(value, 0)
    return _f(value)


def markdown(results: dict[str, Any], table: list[dict[str, Any]]) -> str:
    """``OUT/table.md``: a heading saying what ran, the rows, and what was not measured."""
    device = results.get("device", {})
    heads = [(key, head) for key, head in COLUMNS if head]
    lines = [f"# Serving kit: {device.get('name', '?')} ({results.get('mode')})", "",
             results.get("about", ""), "",
             "| " + " | ".join(h for _, h in heads) + " |", "|" + "---|" * len(heads)]
    for row in table:
        lines.append("| " + " | ".join(_cell(row, k).replace("|", "\\|") for k, _ in heads) + " |")
    missing = [s["step"] for s in results["steps"] if s["status"] not in ("ok",)]
    if missing:
        lines += ["", f"Not measured: {', '.join(missing)} (status column)."]
    return "\n".join(lines) + "\n"


def csv_text(table: list[dict[str, Any]]) -> str:
    """``OUT/table.csv``: every column, numbers unformatted."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[k for k, _ in COLUMNS], extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k, _ in COLUMNS})
    return buffer.getvalue()


def write_table(out: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``out/table.csv`` and ``out/table.md`` from ``results``; returns the rows."""
    table = rows(results)
    for name, text in (("table.csv", csv_text(table)), ("table.md", markdown(results, table))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)
    return table

"""The paper's figures as PNG, drawn from the same frames as the tables (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PNG_METADATA = {"Software": None}  # no version stamp: reruns give the same bytes


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata=PNG_METADATA)


def figure2(leaderboard: pd.DataFrame, path: Path) -> None:
    """Leaderboard: composite and Tier 1 per model (held-out)."""
    plt = _pyplot()
    frame = leaderboard.iloc[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(frame) + 1.2))
    y = range(len(frame))
    ax.barh([i + 0.2 for i in y], frame["tier1"], height=0.4, label="Tier 1", color="#4c72b0")
    judged = bool(frame["judged"].all()) if "judged" in frame else True
    ax.barh([i - 0.2 for i in y], frame["composite"], height=0.4, color="#dd8452",
            label="Composite" if judged else "Composite (no judge: lower bound)")
    ax.set_yticks(list(y), frame["model"])
    ax.set_xlabel("held-out score (mean of six system means)")
    lowest = float(frame[["tier1", "composite"]].min().min())
    ax.set_xlim(0 if lowest < 55 else lowest - 5, 100)  # a cut axis only where all bars are long
    ax.legend(loc="lower right")
    _save(fig, path)
    plt.close(fig)


def figure3(matrix: pd.DataFrame, path: Path, value: str = "composite") -> None:
    """Per-category held-out composite, models x categories (heatmap)."""
    plt = _pyplot()
    table = matrix.pivot(index="model", columns="category", values=value)
    fig, ax = plt.subplots(figsize=(0.6 * table.shape[1] + 2.5, 0.45 * table.shape[0] + 1.2))
    image = ax.imshow(table.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(range(table.shape[1]), table.columns)
    ax.set_yticks(range(table.shape[0]), table.index)
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            v = table.iat[i, j]
            if pd.notna(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if v < 60 else "black")
    fig.colorbar(image, ax=ax, label=f"held-out {value}")
    _save(fig, path)
    plt.close(fig)


def figure4(matrix: pd.DataFrame, baseline: str, path: Path) -> None:
    """The rule baseline's category profile against the other models' mean."""
    plt = _pyplot()
    base = matrix[matrix["model"] == baseline].set_index("category")["composite"]
    others = matrix[matrix["model"] != baseline].groupby("category")["composite"].mean()
    cats = list(base.index)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    x = range(len(cats))
    ax.bar([i - 0.2 for i in x], base.reindex(cats), width=0.4, label=baseline, color="#8c8c8c")
    if len(others):
        ax.bar([i + 0.2 for i in x], others.reindex(cats), width=0.4, label="models (mean)", color="#4c72b0")
    ax.set_xticks(list(x), cats)
    ax.set_ylabel("held-out composite")
    ax.set_ylim(0, 100)
    ax.legend()
    _save(fig, path)
    plt.close(fig)


def figure5(sweep: pd.DataFrame, path: Path) -> None:
    """PEFT gain (mean over seeds - base) against base capability, one point per size."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.axhline(0, color="#999999", linewidth=0.8)
    ax.scatter(sweep["base_tier1"], sweep["delta"], color="#c44e52")
    for _, row in sweep.iterrows():
        ax.annotate(str(row["size"]), (row["base_tier1"], row["delta"]), textcoords="offset points",
                    xytext=(4, 4))
    ax.set_xlabel("base held-out Tier 1")
    ax.set_ylabel("PEFT gain (Tier 1 points)")
    _save(fig, path)
    plt.close(fig)


def _quality_panel(ax, frame: pd.DataFrame, x: str, scale: float, xlabel: str, empty: str) -> None:
    """One panel of Figure ``figure-deployment``: Tier 1 with its interval against ``x``, the front joined."""
    frame = frame[frame[x].notna()].sort_values(x)
    ax.set_xlabel(xlabel)
    if frame.empty:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, color="#777777")
        ax.set_xticks([])
        return
    xs = frame[x].astype(float) / scale
    errors = [frame["tier1"] - frame["tier1_lo"], frame["tier1_hi"] - frame["tier1"]]
    ax.errorbar(xs, frame["tier1"], yerr=errors, fmt="none", ecolor="#999999", capsize=3, linewidth=1)
    front = frame["pareto"].astype(bool).to_numpy()
    ax.scatter(xs[~front], frame["tier1"][~front], facecolors="white", edgecolors="#4c72b0", zorder=3,
               label="dominated")
    ax.scatter(xs[front], frame["tier1"][front], color="#c44e52", zorder=3, label="Pareto front")
    ax.step(xs[front], frame["tier1"][front], where="post", color="#c44e52", linewidth=1, alpha=0.6)
    for value, (_, row) in zip(xs, frame.iterrows()):
        ax.annotate(str(row["model"]), (value, row["tier1"]), textcoords="offset points", xytext=(4, 4),
                    fontsize=7)
    if len(frame) > 1 and xs.min() > 0 and xs.max() / xs.min() > 20:
        ax.set_xscale("log")
    ax.legend(loc="lower right", fontsize=7)


def figure_deployment(quality: pd.DataFrame, path: Path) -> None:
    """Held-out Tier 1 (95% interval) against footprint (local: GGUF GB) and cost (hosted: USD / 1,000 cases)."""
    plt = _pyplot()
    fig, (local, hosted) = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    _quality_panel(local, quality[quality["kind"] == "local"], "gguf_bytes", 1e9, "GGUF size on disk (GB)",
                   "no local rows")
    _quality_panel(hosted, quality[quality["kind"] == "hosted"], "usd_per_1k_cases", 1.0,
                   "USD per 1,000 cases (config prices)", "no priced hosted rows")
    local.set_ylabel("held-out Tier 1")
    local.set_title("local (llama.cpp)", fontsize=9)
    hosted.set_title("hosted", fontsize=9)
    _save(fig, path)
    plt.close(fig)

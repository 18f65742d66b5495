"""The analysis notebook runs top to bottom on real (small) scores."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
NotebookClient = pytest.importorskip("nbclient").NotebookClient

from metrobench.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_notebook_executes(tmp_path, root, monkeypatch):
    for system in ("marta", "doha"):
        run = tmp_path / "runs" / f"{system}.jsonl"
        assert main(["rule-agent", "--data", str(root), "--system", system, "--partition", "holdout",
                     "--out", str(run)]) == 0
        assert main(["score", "--data", str(root), "--run", str(run), "--partition", "holdout",
                     "--out", str(tmp_path / "scores")]) == 0
    monkeypatch.setenv("METROBENCH_SCORES", str(tmp_path / "scores"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "headline     78    83.00" in outputs  # (marta 80.4 + doha 85.6) / 2
    assert "rule-agent" in outputs
    assert not any(o.get("output_type") == "error" for cell in notebook.cells if cell.cell_type == "code"
                   for o in cell.get("outputs", []))

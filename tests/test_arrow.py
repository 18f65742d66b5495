"""``metrobench score`` as its own process imports pyarrow without numpy, and writes the same bytes."""

from __future__ import annotations

from pathlib import Path

from conftest import python_last_line
from metrobench.cli import main

PARQUET = Path("model=rule-agent") / "system=taipei" / "part.parquet"


def test_score_in_its_own_process_skips_numpy_and_writes_the_bytes_a_numpy_process_writes(root, tmp_path):
    run = tmp_path / "taipei.jsonl"
    assert main(["rule-agent", "--data", str(root), "--system", "taipei", "--out", str(run)]) == 0
    own = ["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "own")]
    code = ("import sys; from metrobench.cli import main; "
            f"sys.argv = ['metrobench', *{own!r}]; main(); "
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))")
    assert python_last_line(code) == "['pyarrow']"

    import numpy  # noqa: F401  # this process has numpy: pyarrow here is the ordinary one
    assert main(["score", "--data", str(root), "--run", str(run), "--out", str(tmp_path / "numpy")]) == 0
    assert (tmp_path / "own" / PARQUET).read_bytes() == (tmp_path / "numpy" / PARQUET).read_bytes()


def test_a_caller_passing_argv_keeps_its_own_pyarrow(root, tmp_path):
    """The test suite, a notebook: ``main(argv)`` never hides numpy from a process it does not own."""
    run = tmp_path / "taipei.jsonl"
    code = ("import sys; from metrobench.cli import main; "
            f"main(['rule-agent', '--data', {str(root)!r}, '--system', 'taipei', '--out', {str(run)!r}]); "
            f"main(['score', '--data', {str(root)!r}, '--run', {str(run)!r}, '--out', {str(tmp_path / 's')!r}]); "
            "import pyarrow; print(pyarrow.array([1, 2]).to_numpy().sum())")
    assert python_last_line(code) == "3"

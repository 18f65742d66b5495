"""pyarrow without numpy, for a process that only builds, writes and reads tables.

Importing pyarrow imports numpy when it is installed (0.15–0.2 s on two cores,
more than half of ``import pyarrow.parquet``), only for its conversions to and
from numpy arrays. Building a table from Python lists, writing Parquet and
reading it back to Python values need none of it, and pyarrow is built to run
where numpy is absent. ``metrobench score`` — one process per (model, system)
in the workflow — is such a process, so its command line imports pyarrow this
way first (``cli.main`` calls a subcommand's ``prepare`` only when it owns the
process, never when a caller such as the test suite passes ``argv``).

Only pyarrow's numpy conversions (``Array.to_numpy`` and the like) are lost in
that process; ``import numpy`` itself still works afterwards. The Parquet bytes
are the same either way (``tests/test_arrow.py``).
"""

from __future__ import annotations

import sys


def import_without_numpy() -> bool:
    """Import pyarrow and pyarrow.parquet with numpy hidden; False if either was already imported."""
    if "pyarrow" in sys.modules or "numpy" in sys.modules:
        return False
    sys.modules["numpy"] = None  # type: ignore[assignment]  # what `import numpy` reads as "not installed"
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    finally:
        if sys.modules.get("numpy", False) is None:
            del sys.modules["numpy"]
    return True

# Config helpers, path helpers and wildcard constraints shared by every rule file.

import os

SYSTEMS = config["systems"]


wildcard_constraints:
    system="|".join(SYSTEMS),


def data_root():
    """The benchmark root: a configured local path, or the pinned clone under results/."""
    return config["data"].get("path") or "results/data/metrollm-bench"


def data_flag():
    return f"--data {data_root()}"

# Config helpers, path helpers and wildcard constraints shared by every rule file.

import os

SYSTEMS = config["systems"]


wildcard_constraints:
    system="|".join(SYSTEMS),
    model=r"[A-Za-z0-9][A-Za-z0-9._+-]*",


def data_root():
    """The benchmark root: a configured local path, or the pinned clone under results/."""
    return config["data"].get("path") or "results/data/metrollm-bench"


def data_flag():
    return f"--data {data_root()}"


def judge_flags():
    """Judge and errata options of `metrobench score`, from config["scoring"]."""
    scoring = config.get("scoring", {})
    flags = [f"--judge {scoring.get('judge', 'none')}"]
    for key in ("judge_model", "judge_url", "judge_key_env"):
        if scoring.get(key):
            flags.append(f"--{key.replace('_', '-')} {scoring[key]}")
    if scoring.get("errata"):
        flags.append("--errata " + ",".join(scoring["errata"]))
    return " ".join(flags)

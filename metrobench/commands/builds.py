"""``metrobench builds``: build the named llama.cpp builds a study config serves on (``make builds``).

Contract: reads the study config (default ``config/config.yaml``; later files overlaid), lists
its builds (``--list``: name, tab, the rows on it) or builds and installs each from its tag
(:func:`metrobench.agents.llama_builds.make_builds`; the source from ``$LLAMA_CPP_SOURCE``, the
repository from ``$LLAMA_CPP_REPO``, the compile flags from ``$LLAMA_CMAKE_ARGS``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from metrobench.commands.common import Subparsers, load_study


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("builds", help="build the named llama.cpp builds a study config serves on (make builds)")
    p.add_argument("--config", action="append", default=None, metavar="FILE",
                   help="study config file(s), later ones overlaid (default config/config.yaml)")
    p.add_argument("--venv", default=sys.prefix, help="the virtual environment (default: this Python's)")
    p.add_argument("--list", action="store_true", help="only list the builds and their rows")
    p.add_argument("--force", action="store_true", help="build again even where installed from the tag")
    p.set_defaults(func=cmd_builds)


def cmd_builds(args: argparse.Namespace) -> int:
    from metrobench.agents.llama_builds import REPO_ENV, SOURCE_ENV, UPSTREAM, make_builds

    builds = load_study(args.config or ["config/config.yaml"]).llama_builds()
    if args.list:
        for name, use in builds.items():
            print(f"{name}\t{' '.join(use.rows)}")
        return 0
    names = make_builds(builds, Path(args.venv), source=os.environ.get(SOURCE_ENV) or None, force=args.force,
                        repo_url=os.environ.get(REPO_ENV) or UPSTREAM)
    print(f"llama.cpp builds: {', '.join(names) if names else 'none named by the config'}")
    return 0

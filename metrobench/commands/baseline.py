"""``metrobench rule-agent``: the scripted baseline (no model), one transcript per system: an alias of ``run``.

Contract: runs the rule agent (``provider: scripted``, :mod:`metrobench.agents.rule_agent`) on the
selected cases of each ``--system``: one run job each, executed as ``run`` executes it
(:func:`metrobench.commands.runs.execute`), and writes its transcript to ``--out`` (``{system}`` in the path
names the system, required with several, which then share one process and its imports): the same
records, ``messages`` and run stamps included, resumed as ``run`` resumes (a transcript of the
other mode is set aside, never deleted). The benchmark's pinned digests are checked first unless
``--no-verify``. ``--mode teacher`` runs it as a teacher (stops the kiosk accepts); the default
``baseline`` is the paper's baseline, unchanged. The workflow runs ``run --view``; this stays for users.
"""

from __future__ import annotations

import argparse

from metrobench.commands.common import Subparsers, add_data, add_selection, add_verify, at_least_one, system_names
from metrobench.errors import MetrobenchError


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rule-agent", help="run the scripted baseline, one transcript per system")
    add_data(p)
    p.add_argument("--system", required=True, action="append", choices=system_names(),
                   help="system (repeatable: several in one process, with {system} in --out)")
    add_selection(p)
    p.add_argument("--sample", type=at_least_one, help="N cases spread over the categories (as `bench`'s)")
    p.add_argument("--model", default="rule-agent", help="model name recorded in the transcript")
    p.add_argument("--mode", default="baseline", choices=("baseline", "teacher"),
                   help="baseline: the paper's baseline, the reference's quirks included (default); "
                        "teacher: the same decisions, submitting route_planner's stops so the kiosk accepts them")
    p.add_argument("--out", required=True, help="transcript to write (JSONL); {system} stands for the system")
    add_verify(p)
    p.set_defaults(func=cmd_rule_agent)


def cmd_rule_agent(args: argparse.Namespace) -> int:
    from metrobench.agents.rule_agent import scripted_config
    from metrobench.commands.runs import execute
    from metrobench.run_job import RunJob

    systems = list(dict.fromkeys(args.system))
    if len(systems) > 1 and "{system}" not in args.out:
        raise MetrobenchError("--out: with several --system, the path must hold {system} (one transcript each)")
    cfg = scripted_config(args.model, args.mode)
    for system in systems:
        job = RunJob(model=cfg.name, system=system, view=args.partition, config=cfg, data=args.data,
                     split=args.split, sample=args.sample, work=None, out=args.out.replace("{system}", system),
                     gguf=None, model_file=None, card=None)
        execute(job, set_aside=True, no_verify=args.no_verify)
    return 0

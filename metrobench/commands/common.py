"""What several stages share: argument types, common options, study and model configs, case selection.

Contract: importing this module costs nothing beyond argparse and dataclasses (every
other import sits inside a function), and every failure it reports is a
:class:`~metrobench.errors.MetrobenchError` naming the file, flag or case. The parser
builders (``add_*``) take the parser; the helpers that compute something take values,
not the parsed ``Namespace`` (each command passes its own ``args.x``), so a caller
other than the CLI can use them: :func:`open_bench`, :func:`verified_bench`,
:func:`model_config` (with :class:`ModelFlags`, the model flags as one typed value); a run's
cases are its :class:`~metrobench.run_job.RunJob`'s.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from metrobench.errors import MetrobenchError

#: ``--provider``'s choices: the model config's ``Provider`` (not imported here, to keep the parser
#: cheap; tests/test_runner.py holds the two equal).
PROVIDERS = ("llama_cpp", "openai", "azure", "azure_responses", "mistral", "scripted")

if TYPE_CHECKING:
    from pathlib import Path

    from metrobench.data import Benchmark
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.study import StudyConfig

Subparsers = argparse._SubParsersAction  # what ``register(subparsers)`` receives

SPLIT_HELP = "split file (default: the benchmark's committed split)"


def _whole(text: str, what: str, low: int, high: int | None, why: str) -> int:
    """A whole-number flag in ``[low, high]``; argparse prints ``why`` when it is out of range."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{value} is not {why}")
    return value


def at_least_one(text: str) -> int:
    return _whole(text, "a whole number", 1, None, "at least 1")


def port_number(text: str) -> int:
    return _whole(text, "a port number", 0, 65535, "a port number (0-65535)")


def _finite(text: str) -> float:
    """A float flag: a number, and finite (``nan`` and ``inf`` pass float() and then misbehave)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _non_negative(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} is negative")
    return value


def _positive(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value:g} is not above 0")
    return value


def positive(text: str) -> float:
    """A finite number above 0 (seconds of a deadline: 0 would fail every request)."""
    return _positive(text)


def fraction(text: str) -> float:
    """A fraction strictly between 0 and 1 (0 or 1 would put every case on one side)."""
    value = _finite(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not between 0 and 1 (exclusive)")
    return value


def percent(text: str) -> float:
    """A threshold on a 0-100 score: outside that range the filter keeps all or nothing."""
    value = _finite(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{value:g} is not a percentage (0-100)")
    return value


def name_list(text: str) -> str:
    """A comma-separated list with at least one item (an empty one would silently mean "all")."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError("an empty item in the list (give comma-separated names, none empty)")
    return ",".join(items)


#: The one name ``--system`` takes for every system (``eval``).
ALL_SYSTEMS = "all"


def system_list(text: str) -> str:
    """``eval --system``: ``all`` alone, or a comma-separated list of systems (:func:`name_list`).

    ``all`` in a list (``all,marta``) is refused saying so: it already means every system, and read
    as a system name it was refused as unknown by the very message that offers it."""
    items = name_list(text).split(",")
    if ALL_SYSTEMS in items and len(items) > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: {ALL_SYSTEMS} stands alone (every system): give "
                                         f"{ALL_SYSTEMS}, or a list of systems without it")
    return ",".join(items)


def env_name(text: str) -> str:
    """The NAME of an environment variable; a key given here is refused without being echoed."""
    from metrobench.credentials import env_name_problem

    problem = env_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def http_url(text: str) -> str:
    """An http(s) endpoint without credentials in it (quoted redacted if refused)."""
    from metrobench.credentials import url_problem

    problem = url_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="ROOT", help="benchmark root (default: $METROBENCH_DATA, else "
                                                  "../shared/metrollm-bench, else .data/metrollm-bench)")


def add_selection(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--partition (all, train or holdout cases) and --split, as every case-selecting stage takes them."""
    from metrobench.data.partition import SELECTIONS
    from metrobench.vocabulary import WHOLE

    p.add_argument("--partition", default=WHOLE, choices=SELECTIONS, help=help)
    p.add_argument("--split", help=SPLIT_HELP)


def add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-verify", action="store_true",
                   help="skip the SHA-256 check of the pinned benchmark files (ground truth unverified)")


def system_names() -> tuple[str, ...]:
    """The benchmark's systems, for ``choices=`` of a ``--system`` flag."""
    from metrobench.data.root import SYSTEMS

    return SYSTEMS


#: Where this process found each benchmark root (resolved root -> what said so), the first time it
#: opened it; and the roots whose ``benchmark data:`` line it has printed. ``eval`` opens the root,
#: then its runs open it again under ``--data ROOT``: the line is printed once and names what
#: first named the root ($METROBENCH_DATA, not the ``--data`` eval passed on).
_FOUND: dict[Path, str] = {}
_SAID: set[Path] = set()


def _source_words(source: str) -> str:
    """What named the root, as the line says it: ``$METROBENCH_DATA`` for the variable."""
    from metrobench.data.root import ENV_VAR

    return f"${ENV_VAR}" if source == ENV_VAR else source


def open_bench(data: str | None, *, say: bool = False) -> Benchmark:
    """The benchmark at ``data`` (``--data``; ``None``: the default root, :meth:`Benchmark.open`).

    ``say``: print ``benchmark data: ROOT (from SOURCE)`` on stdout, once per process and root (the
    workflow says it at its start; ``run``, ``bench``, ``score`` and ``eval`` say it too, so a
    result is never read without knowing which copy of the data it was made on). Off for commands
    whose stdout is data (``replay``, ``serve-tools``)."""
    from metrobench.data import Benchmark
    from metrobench.data.root import locate_root

    _, source = locate_root(data)
    bench = Benchmark.open(data)
    _FOUND.setdefault(bench.root, source)
    if say and bench.root not in _SAID:
        _SAID.add(bench.root)
        print(f"benchmark data: {bench.root} (from {_source_words(_FOUND[bench.root])})", flush=True)
    return bench


def verified_bench(data: str | None, no_verify: bool, *, say: bool = False) -> Benchmark:
    """The benchmark, its pinned digests checked first unless ``no_verify`` (once per process);
    ``say`` as :func:`open_bench`."""
    from metrobench.data.root import verify_once

    bench = open_bench(data, say=say)
    if not no_verify:
        verify_once(bench.root)
    return bench


def load_study(paths: list[str] | None) -> StudyConfig:
    """Study config files merged in order and validated (:func:`metrobench.study.load_study`)."""
    from metrobench.study import load_study as load

    return load(paths)


@dataclass(frozen=True)
class ModelFlags:
    """The model settings given as flags (:func:`add_model_options`); each set one overrides the
    config's, ``None`` leaves it. The field names are the model config's own."""

    provider: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    thinking: bool | None = None
    reasoning_effort: str | None = None
    concurrency: int | None = None
    max_rounds: int | None = None
    timeout_s: float | None = None

    @classmethod
    def parsed(cls, args: argparse.Namespace) -> ModelFlags:
        """The flags :func:`add_model_options` declared, as parsed (its one reader)."""
        return cls(provider=args.provider, base_url=args.base_url, api_key_env=args.api_key_env,
                   temperature=args.temperature, max_tokens=args.max_tokens, thinking=args.thinking,
                   reasoning_effort=args.reasoning_effort, concurrency=args.concurrency,
                   max_rounds=args.max_rounds, timeout_s=args.timeout)


def model_config(*, config: list[str] | None = None, model_file: str | None = None, model: str | None = None,
                 gguf: str | None = None, repeat: int | None = None,
                 flags: ModelFlags = ModelFlags()) -> ModelConfig:
    """The run's model config: from the study ``config``'s ``models`` (``--config``), else ``model_file``
    (``--model-config``), else the ``flags`` alone; ``flags`` override either file.

    ``model`` (``--model``) names the model (with ``config``: the configured one); ``gguf`` (``--gguf``)
    serves that file instead of the model's own. ``repeat`` i (``--repeat``): run i of the model's
    ``repeats`` (:meth:`ModelConfig.for_repeat`: named ``<model>-rep<i>``, its own sampling seed).
    """
    from metrobench.agents.runner.config import resolve_model_config

    overrides = {"name": model, **asdict(flags)}
    if config:
        if not model:
            raise MetrobenchError("with --config, name the model with --model")
        return load_study(config).config_of(model, gguf=gguf, repeat=repeat or 1, **overrides)
    if not model_file and not model:
        raise MetrobenchError("name the model with --model (or give --model-config)")
    return resolve_model_config(model_file, gguf=gguf, repeat=repeat or 1, **overrides)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of ``run`` and ``bench``: system, model settings, case selection, transcript.

    ``--no-verify``: the data's pinned digests are checked first, as ``eval`` and ``score`` check
    them (:func:`verified_bench`), so a run is never made on an edited copy unnoticed."""
    add_data(p)
    add_verify(p)
    p.add_argument("--system", required=True, choices=system_names())
    add_model_options(p)
    add_case_options(p)
    p.add_argument("--out", help="transcript (JSONL), appended to and resumed")
    p.add_argument("--work", help="the model's growing transcript of this system: run and resume there, then "
                                  "write --out as this selection's view of it")
    add_resume_options(p)
    add_progress_option(p)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """Where the model's settings come from (a study config, a model config, flags) and the flags."""
    p.add_argument("--model-config", help="YAML with the model's settings (flags below override it)")
    p.add_argument("--config", action="append",
                   help="study config(s): take the model's settings from its `models` entry")
    p.add_argument("--gguf", help="serve this GGUF (a student) with the config's student_serving settings")
    p.add_argument("--model", help="model name (paths, tables)")
    p.add_argument("--repeat", type=at_least_one,
                   help="run I of the model's `repeats`: named <model>-repI, its own sampling seed (1: the model)")
    p.add_argument("--provider", choices=PROVIDERS)
    p.add_argument("--base-url", type=http_url, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--api-key-env", type=env_name, help="environment variable holding the API key")
    p.add_argument("--temperature", type=_non_negative)
    p.add_argument("--max-tokens", type=at_least_one)
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--reasoning-effort")
    p.add_argument("--concurrency", type=at_least_one,
                   help="requests in flight (default: 2 local, 4 Mistral, 8 Azure and hosted OpenAI; local means "
                        "provider llama_cpp, or openai with a base_url on 127.0.0.1, localhost or ::1, whose "
                        "server is first asked for its slot count (GET /props, llama-server's total_slots) and "
                        "given that many where it answers)")
    p.add_argument("--max-rounds", type=at_least_one, help="model calls per case, all turns together (default 20)")
    p.add_argument("--timeout", type=_positive, help="seconds per request (default 240)")


def add_case_options(p: argparse.ArgumentParser, partition_help: str | None = None) -> None:
    """Which cases of a system a run covers (:meth:`metrobench.run_job.RunJob.resolve`)."""
    add_selection(p, partition_help)
    p.add_argument("--cases", type=name_list, help="comma-separated case ids")
    p.add_argument("--limit", type=at_least_one, help="only the first N cases")
    p.add_argument("--sample", type=at_least_one, help="N cases spread over the categories (the CPU demo)")


def add_progress_option(p: argparse.ArgumentParser) -> None:
    """``--progress S``: seconds between the status lines a run prints while its cases run."""
    p.add_argument("--progress", type=_non_negative, metavar="SECONDS",
                   help="seconds between progress lines while cases run (cases done, failed, elapsed, ETA, a case "
                        "running long; default: 1 on a terminal, a bar redrawn in place, 10 in a log; 0: a line "
                        "only when a case ends)")


def add_resume_options(p: argparse.ArgumentParser) -> None:
    """What happens to a transcript already there: resumed (default), started anew, or set aside."""
    p.add_argument("--restart", action="store_true",
                   help="start a new transcript (--work, else --out): the existing one is renamed to "
                        "<name>.<its fingerprint>.jsonl beside it, never deleted")
    p.add_argument("--rerun-changed", action="store_true",
                   help="run again the selected cases whose data changed since they were run: their new records "
                        "are appended and supersede the old (which stay); every other case is kept")
    p.add_argument("--set-aside", action="store_true",
                   help="a transcript (--work, else --out) made under other settings or serving is renamed to "
                        "<name>.<its fingerprint>.jsonl beside it and a new one started, instead of refused "
                        "(the workflow passes it: an edited model setting reruns, the old cases kept)")

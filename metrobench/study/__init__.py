"""The study config as one typed model: its schema, its defaults and its documentation.

Contract: :class:`StudyConfig` covers every top-level key of ``config/*.yaml``
(the paper's study, the CPU demo, the mini-study). A key it does not know is an
error (``extra="forbid"``), except keys starting with ``x-``, which hold YAML
anchors (``x-local: &local``) and are dropped. :func:`load_study` merges config
files in order (later files override, nested mappings merged, as Snakemake
merges ``--configfile``) and raises one :class:`~metrobench.errors.MetrobenchError`
naming the file and the field on bad input. Inline ``models`` entries and
``student_serving`` are checked with the runner's own
:class:`~metrobench.agents.runner.config.ModelConfig`, so a config that loads is
one whose models the runner accepts; path entries are read when used.

Why one model: it is the only check a config meets. The workflow validates with it
at plan time (``workflow/rules/common.smk``: one ``metrobench: error:`` line) and
every command that reads the study does the same, so the keys the workflow accepts,
the keys the commands read and their defaults cannot drift apart. Two files are
generated from it, and tests keep the committed copies equal to what it generates:
``config/defaults.yaml`` (``python -m metrobench.study --defaults``: every key with
its default and description, in model order; a study config states only what
differs) and the JSON schema ``workflow/schemas/config.schema.yaml``
(``--schema``: the same keys for editors and readers; nothing validates with it).
Defaults that depend on other keys are methods here (:meth:`StudyConfig.view_models`),
not fallbacks in the rules.

Repeated runs: a model entry (inline, or its model config file) may say ``repeats: k``
(an int of at least 1, checked by the runner's ModelConfig; default 1). The study then
runs it k times, as the models :func:`metrobench.layout.repeat_name` names (the model
itself, then ``<model>-rep2`` ...): :attr:`StudyConfig.repeats` lists them and
:meth:`StudyConfig.members` expands a model to its runs as it expands a student group
to its seeds, so every table that averages over a group's members averages over a
model's repeats. A repeat's name may not be a configured model's, and students repeat
by seed, not by ``student_serving.repeats``.

A configured model may not carry a student's name (``<size>-peft-s<seed>``) or a student
group's (``<size>-peft``): the workflow serves a student under that name, so the model
would be replaced by it without a word; the config is refused, naming both.

The package: :mod:`~metrobench.study.schema` (the typed model), :mod:`~metrobench.study.checks` (reading,
merging and the checks across sections) and :mod:`~metrobench.study.generated` (the generated defaults and
schema, ``python -m metrobench.study``).
"""

from metrobench.study.schema import (  # noqa: F401 (the package's names)
    ANCHOR_PREFIX, BaseDownload, Bench, Calibration, CalibrationJudge, Data, Downloads, Erratum, Export,
    GgufDownload, Gpu, HubRepo, InlineModel, LeaderboardRow, MAX_GPU_GIB, ModelName, Partition, Price,
    PriceDate, RULE_AGENT, Rate, Report, SOURCE_KINDS, Scaling, Scoring, Section, SensitivityCell, Source,
    Stats, Student, StudentSize, StudyConfig, System, Termination, Throughput, Trainset, Unique, View,
)
from metrobench.study.checks import (  # noqa: F401 (the package's names)
    CTX_MULTIPLE, context_problem, load_study, merge, merge_sources, read_sources, validate_study,
)
from metrobench.study.generated import (  # noqa: F401 (the package's names)
    DEFAULTS_HEADER, DEFAULTS_PATH, DEFAULTS_WIDTH, SCHEMA_HEADER, SCHEMA_PATH, defaults_text, json_schema,
    main, schema_text,
)

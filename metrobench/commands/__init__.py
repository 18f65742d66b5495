"""The ``metrobench`` subcommands, one module per pipeline stage.

Each stage module defines every subcommand's options right beside its handler
and exposes ``register(subparsers)``, which adds its parsers in the order
``metrobench --help`` lists them. :mod:`metrobench.commands.common` holds what
several stages share (study-config loading, model-config resolution, case
selection, the common options). Heavy imports stay inside the handlers, so
building the parser costs only these small modules.
"""

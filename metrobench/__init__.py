"""metrobench: a reproducible pipeline for MetroLLM-Bench.

Every stage of the study (partition, tools, runs, scoring, training, statistics)
lives in this package and is exposed as a ``metrobench <stage>`` command, so the
Snakemake rules stay one shell line each and any stage can be run by hand.
"""

__version__ = "0.1.0"

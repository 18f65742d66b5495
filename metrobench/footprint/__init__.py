"""What a study's jobs need of the workstation before any of them starts: GPU memory and disk.

Contract: estimates, never measurements, each the sum of named parts so a reader can
check the arithmetic (``docs/paper-study.md``, "Does it fit"):

* :mod:`.architectures`: the widths a serving estimate needs, read from a GGUF's header
  where the file is present, else from a small per-architecture table (widths marked
  ``provisional`` are inferred, not read from a released config);
* :mod:`.serving`: one llama-server's peak GPU memory (weights on the GPU, KV cache,
  recurrent state, compute buffer, CUDA context) for a configured model or a student;
* :mod:`.training`: one QLoRA training job's peak GPU memory per size and recipe (the
  estimate ``benchmarks/memory_plan.py`` prints);
* :mod:`.fit`: the configured card (``gpu`` in the study config) against an estimate: the
  one-line refusal ``metrobench plan``, ``doctor`` and the workflow give;
* :mod:`.disk`: every file a plan fetches and writes, against free space;
* :mod:`.schedule`: the plan's GPU jobs on one card, one at a time or packed by memory (the
  makespan), and the ``gpu_mem_mib`` a GPU job declares to Snakemake;
* :mod:`.measured`: the serving kit's recorded memory table, held against :mod:`.serving`.

Why here and not in the rules: the plan, the doctor and the workflow's own start all ask
the same question and must give the same answer.
"""

GIB = 2**30
GB = 1e9

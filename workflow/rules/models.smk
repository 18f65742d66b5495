# Models by name (metrobench/hub/): each fetch job downloads exactly what the lock
# (downloads.lock) says and verifies it before any job uses it. An entry the lock does
# not hold yet stops its job at once with one line naming `metrobench lock`; fetch
# jobs come first (priority), so that happens seconds into a run, never hours. No GPU:
# they run before, and beside, the GPU jobs. The error line is also shown (tee).


rule fetch_gguf:
    output:
        "{gguf}",
    log:
        "logs/models/{gguf}.log",
    wildcard_constraints:
        gguf=_alternatives(GGUF_DOWNLOADS),
    priority: 100
    conda:
        TRAIN_ENV  # huggingface_hub
    resources:
        gpu=0,
    params:
        lock=DOWNLOADS.lock,
    shell:
        "metrobench fetch-model --lock {params.lock} --gguf {output} 2>&1 | tee {log}"


rule fetch_base:
    output:
        paths.base_stamp("{base}"),
    log:
        "logs/models/{base}.log",
    wildcard_constraints:
        base=_alternatives(BASE_DOWNLOADS),
    priority: 100
    conda:
        TRAIN_ENV
    resources:
        gpu=0,
    params:
        lock=DOWNLOADS.lock,
    shell:
        "metrobench fetch-model --lock {params.lock} --base {wildcards.base} --stamp {output}"
        " 2>&1 | tee {log}"

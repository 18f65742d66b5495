# Pinned model downloads (config downloads, metrobench/downloads.py): base GGUFs into
# their configured paths, SHA-256 checked; students' base weights into the standard
# Hugging Face cache. No GPU: they run before, and beside, the GPU jobs.


rule fetch_gguf:
    output:
        "{gguf}",
    log:
        "logs/models/{gguf}.log",
    wildcard_constraints:
        gguf=_alternatives(GGUF_DOWNLOADS),
    conda:
        TRAIN_ENV  # huggingface_hub
    resources:
        gpu=0,
    params:
        repo=lambda w: GGUF_DOWNLOADS[w.gguf]["repo"],
        file=lambda w: GGUF_DOWNLOADS[w.gguf]["file"],
        revision=lambda w: GGUF_DOWNLOADS[w.gguf]["revision"],
        sha256=lambda w: GGUF_DOWNLOADS[w.gguf]["sha256"],
    shell:
        "metrobench fetch-model --repo {params.repo} --file {params.file} --revision {params.revision}"
        " --sha256 {params.sha256} --gguf {output} > {log} 2>&1"


rule fetch_base:
    output:
        "results/models/{base}.json",
    log:
        "logs/models/{base}.log",
    wildcard_constraints:
        base=_alternatives(BASE_DOWNLOADS),
    conda:
        TRAIN_ENV
    resources:
        gpu=0,
    params:
        revision=lambda w: BASE_DOWNLOADS[w.base]["revision"],
        patterns=lambda w: " ".join(
            [
                f"--allow '{p}'"
                for p in BASE_DOWNLOADS[w.base].get("allow_patterns") or []
            ]
            + [
                f"--ignore '{p}'"
                for p in BASE_DOWNLOADS[w.base].get("ignore_patterns") or []
            ]
        ),
    shell:
        "metrobench fetch-model --repo {wildcards.base} --revision {params.revision} {params.patterns}"
        " --stamp {output} > {log} 2>&1"

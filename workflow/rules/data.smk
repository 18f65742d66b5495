# The benchmark data (found as the commands find it, else a clone at the pinned commit), its
# verification, and the train/held-out partition.


if not DATA_FOUND:

    rule fetch_data:
        output:
            directory(paths.data_clone()),
        log:
            "logs/data/fetch.log",
        conda:
            "../envs/cpu.yaml"
        params:
            commit=STUDY.data.commit,
        shell:
            "metrobench fetch-data --dest {output} --commit {params.commit} > {log} 2>&1"


rule verify_data:
    input:
        [] if DATA_FOUND else paths.data_clone(),
    output:
        paths.data_verified(),
    log:
        "logs/data/verify.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
    shell:
        "metrobench verify-data {params.data} --stamp {output} > {log} 2>&1"


rule partition:
    input:
        paths.data_verified(),
    output:
        paths.split_path(),
    log:
        "logs/data/partition.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        seed=STUDY.partition.seed,
        frac=STUDY.partition.frac_holdout,
    shell:
        "metrobench partition {params.data} --seed {params.seed} --frac {params.frac}"
        " --out {output} > {log} 2>&1"

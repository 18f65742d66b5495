# The benchmark data (a local path or a clone at the pinned commit), its
# verification, and the train/held-out partition.


if not config["data"].get("path"):

    rule fetch_data:
        output:
            directory("results/data/metrollm-bench"),
        log:
            "logs/data/fetch.log",
        conda:
            "../envs/cpu.yaml"
        params:
            commit=config["data"]["commit"],
        shell:
            "metrobench fetch-data --dest {output} --commit {params.commit} > {log} 2>&1"


rule verify_data:
    input:
        [] if config["data"].get("path") else "results/data/metrollm-bench",
    output:
        "results/data/verified.json",
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
        "results/data/verified.json",
    output:
        "results/partition.json",
    log:
        "logs/data/partition.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        seed=config["partition"]["seed"],
        frac=config["partition"]["frac_holdout"],
    shell:
        "metrobench partition {params.data} --seed {params.seed} --frac {params.frac}"
        " --out {output} > {log} 2>&1"

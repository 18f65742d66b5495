# Runs, scores and summaries. A run is one transcript per (model, system); the rule
# baseline produces its runs in-process; served models arrive with the runner.


rule rule_agent:
    input:
        split="results/partition.json",
    output:
        "results/runs/rule-agent/{system}.jsonl",
    log:
        "logs/runs/rule-agent/{system}.log",
    benchmark:
        "results/benchmarks/runs/rule-agent/{system}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
    shell:
        "metrobench rule-agent {params.data} --system {wildcards.system} --split {input.split}"
        " --out {output} > {log} 2>&1"


rule score:
    input:
        run="results/runs/{model}/{system}.jsonl",
        split="results/partition.json",
    output:
        "results/scores/model={model}/system={system}/part.parquet",
    log:
        "logs/scores/{model}/{system}.log",
    benchmark:
        "results/benchmarks/scores/{model}/{system}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        judge=judge_flags(),
    shell:
        "metrobench score {params.data} --run {input.run} --split {input.split}"
        " --model {wildcards.model} --system {wildcards.system} --out results/scores"
        " {params.judge} > {log} 2>&1"


rule summary:
    input:
        expand("results/scores/model={{model}}/system={system}/part.parquet", system=SYSTEMS),
    output:
        "results/summary/{model}.txt",
    log:
        "logs/summary/{model}.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "(metrobench summary --scores results/scores --model {wildcards.model} --partition holdout"
        " && echo && metrobench summary --scores results/scores --model {wildcards.model}"
        " --partition full) > {output} 2> {log}"


rule bench_model:
    # A model from config["models"]: served with llama.cpp when its config has a
    # `serving` block, else called at its endpoint. The transcript grows in
    # results/work/ (kept across failed or killed jobs, so a rerun resumes where
    # it stopped) and is copied to the declared output when the run completes.
    input:
        split="results/partition.json",
        model=lambda w: config["models"][w.model],
    output:
        "results/runs/{model}/{system}.jsonl",
    log:
        run="logs/runs/{model}/{system}.log",
        server="logs/runs/{model}/{system}.server.log",
    benchmark:
        "results/benchmarks/runs/{model}/{system}.tsv"
    wildcard_constraints:
        model="|".join(sorted(config.get("models", {})) or ["__none__"]),
    resources:
        gpu=1,
    conda:
        "../envs/serve.yaml"
    params:
        data=data_flag(),
        partition=config.get("bench", {}).get("partition", "all"),
        work=lambda w: f"results/work/runs/{w.model}/{w.system}.jsonl",
    shell:
        "metrobench bench {params.data} --model-config {input.model} --system {wildcards.system}"
        " --partition {params.partition} --split {input.split} --out {params.work}"
        " --server-log {log.server} > {log.run} 2>&1 && cp {params.work} {output}"

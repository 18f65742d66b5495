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

# Runs, scores and summaries. A run is one transcript per (model, system): the rule
# baseline in-process, configured models served with llama.cpp or called at their
# endpoint, students served from their Q4_K_M GGUF.


rule rule_agent:
    input:
        split="results/partition.json",
    output:
        layout.run_path("rule-agent", "{system}"),
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


rule bench_model:
    # The transcript grows in results/work/ (kept across failed or killed jobs, so a
    # rerun resumes where it stopped) and is copied to the output when complete.
    input:
        unpack(bench_inputs),
    output:
        layout.run_path("{model}", "{system}"),
    log:
        run="logs/runs/{model}/{system}.log",
        server="logs/runs/{model}/{system}.server.log",
    benchmark:
        "results/benchmarks/runs/{model}/{system}.tsv"
    wildcard_constraints:
        model=_alternatives(BENCH_MODELS),
    conda:
        "../envs/serve.yaml"
    resources:
        gpu=gpu_jobs,
    params:
        data=data_flag(),
        config=config_flags(),
        gguf=gguf_flag,
        partition=STUDY.bench.partition,
        sample=sample_flag(),
        work=lambda w: f"results/work/runs/{w.model}/{w.system}.jsonl",
    shell:
        "metrobench bench {params.data} {params.config} --model {wildcards.model} {params.gguf}"
        " --system {wildcards.system} --partition {params.partition} {params.sample} --split {input.split}"
        " --out {params.work} --server-log {log.server} > {log.run} 2>&1"
        " && cp {params.work} {output}"


rule score:
    input:
        run=layout.run_path("{model}", "{system}"),
        split="results/partition.json",
    output:
        layout.scores_path("{model}", "{system}"),
    log:
        "logs/scores/{model}/{system}.log",
    benchmark:
        "results/benchmarks/scores/{model}/{system}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        judge=judge_flags(),
        scores=lambda w: layout.scores_root(),
        partition=STUDY.bench.partition,
        sample=sample_flag(),
    shell:
        "metrobench score {params.data} --run {input.run} --split {input.split}"
        " --partition {params.partition} {params.sample} --model {wildcards.model}"
        " --system {wildcards.system} --out {params.scores} {params.judge} > {log} 2>&1"


rule score_tier1:
    # Tier 1 only (--judge none): what Table 4 reads, so it never needs ANTHROPIC_API_KEY.
    input:
        run=layout.run_path("{model}", "{system}"),
        split="results/partition.json",
    output:
        layout.scores_path("{model}", "{system}", tier1=True),
    log:
        "logs/scores-tier1/{model}/{system}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        partition=STUDY.bench.partition,
        sample=sample_flag(),
    shell:
        "metrobench score {params.data} --run {input.run} --split {input.split}"
        " --partition {params.partition} {params.sample} --model {wildcards.model}"
        " --system {wildcards.system} --out results/scores-tier1 --judge none > {log} 2>&1"


rule summary:
    input:
        scores_of(["{model}"]),
    output:
        layout.summary_path("{model}"),
    log:
        "logs/summary/{model}.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "(metrobench summary --scores results/scores --model {wildcards.model} --partition holdout"
        " && echo && metrobench summary --scores results/scores --model {wildcards.model}"
        " --partition full) > {output} 2> {log}"

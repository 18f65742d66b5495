# Teacher traces on the train partition, scored Tier 1 only, filtered into the
# distillation training set (Tier 1 >= threshold, every turn ending on an accepted
# submission, one trace per case). The rule agent teaches in its teacher mode (the
# stops the kiosk accepts); its baseline mode is the benchmark's baseline row.


rule teacher_rule_agent:
    input:
        split="results/partition.json",
    output:
        "results/teacher/runs/rule-agent/{system}.jsonl",
    log:
        "logs/teacher/runs/rule-agent/{system}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
    shell:
        "metrobench rule-agent {params.data} --mode teacher --system {wildcards.system} --partition train"
        " --split {input.split} --out {output} > {log} 2>&1"


rule teacher_model:
    input:
        unpack(bench_inputs),
    output:
        "results/teacher/runs/{model}/{system}.jsonl",
    log:
        run="logs/teacher/runs/{model}/{system}.log",
        server="logs/teacher/runs/{model}/{system}.server.log",
    benchmark:
        "results/benchmarks/teacher/{model}/{system}.tsv"
    wildcard_constraints:
        model=_alternatives([t for t in TEACHERS if t != "rule-agent"]),
    conda:
        "../envs/serve.yaml"
    resources:
        gpu=gpu_jobs,
    params:
        data=data_flag(),
        config=config_flags(),
        work=lambda w: f"results/work/teacher/{w.model}/{w.system}.jsonl",
    shell:
        "metrobench bench {params.data} {params.config} --model {wildcards.model}"
        " --system {wildcards.system} --partition train --split {input.split}"
        " --out {params.work} --server-log {log.server} > {log.run} 2>&1"
        " && cp {params.work} {output}"


rule teacher_score:
    input:
        run="results/teacher/runs/{model}/{system}.jsonl",
        split="results/partition.json",
    output:
        "results/teacher/scores/model={model}/system={system}/part.parquet",
    log:
        "logs/teacher/scores/{model}/{system}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
    shell:
        "metrobench score {params.data} --run {input.run} --split {input.split} --partition train"
        " --model {wildcards.model} --system {wildcards.system} --out results/teacher/scores"
        " --judge none > {log} 2>&1"


rule trainset:
    input:
        expand(
            "results/teacher/scores/model={model}/system={system}/part.parquet",
            model=TEACHERS,
            system=SYSTEMS,
        ),
        split="results/partition.json",
        recipes=sorted({spec.recipe for spec in STUDENTS.values()}),
    output:
        dataset=layout.teacher_dataset(),
        table=layout.teacher_composition(),
    log:
        "logs/teacher/trainset.log",
    conda:
        "../envs/train.yaml"
    params:
        data=data_flag(),
        recipes=lambda w, input: " ".join(f"--recipe {r}" for r in input.recipes),
        teachers=",".join(TEACHERS),
        min_tier1=STUDY.trainset.min_tier1,
    shell:
        "metrobench trainset {params.data} --scores results/teacher/scores --runs results/teacher/runs"
        " --teachers {params.teachers} --min-tier1 {params.min_tier1} --split {input.split}"
        " --out {output.dataset} --composition {output.table} {params.recipes} > {log} 2>&1"

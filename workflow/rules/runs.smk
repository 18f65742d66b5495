# Runs and scores. A model runs each case of a system once, into its work transcript
# (results/work/: kept across failed or killed jobs, so a rerun resumes where it stopped);
# each partition a target reads is a view cut from it (results/runs/<partition>/): the
# benchmark's tables read bench.partition, Table 4 holdout, the teachers' traces train.
# Configured models are served with llama.cpp or called at their endpoint, students
# served from their Q4_K_M GGUF; the rule agent runs in-process.


rule run:
    input:
        unpack(run_inputs),
    output:
        paths.run_path("{model}", "{system}", "{partition}"),
    log:
        run="logs/runs/{partition}/{model}/{system}.log",
        server="logs/runs/{partition}/{model}/{system}.server.log",
    benchmark:
        paths.benchmark_path("runs/{partition}/{model}/{system}")
    conda:
        "../envs/serve.yaml"
    resources:
        gpu=gpu_jobs,
        gpu_mem_mib=served_gpu_mib,
    params:
        # derived (a function of the input): not compared, a reworded command reruns nothing
        command=run_command,
        # compared by Snakemake (a function of wildcards): an edited setting reruns the run
        settings=run_settings,
    shell:
        "{params.command} --server-log {log.server} > {log.run} 2>&1"


rule score:
    # One job per model and view: its systems' runs scored in one process. Tier 1 only
    # (tiers=tier1, --judge none) never needs a judge's key: Table 4, the teachers.
    input:
        runs=expand(
            paths.run_path("{{model}}", "{system}", "{{partition}}"), system=SYSTEMS
        ),
        split=paths.split_path(),
    output:
        expand(
            paths.scores_path("{{model}}", "{system}", "{{partition}}", "{{tiers}}"),
            system=SYSTEMS,
        ),
    log:
        "logs/scores/{tiers}/{partition}/{model}.log",
    benchmark:
        paths.benchmark_path("scores/{tiers}/{partition}/{model}")
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        runs=lambda w, input: " ".join(f"--run {run}" for run in input.runs),
        judge=lambda w: judge_flags() if w.tiers == layout.TIER2 else "--judge none",
        scores=lambda w: paths.scores_root(w.partition, w.tiers),
    shell:
        "metrobench score {params.data} {params.runs} --split {input.split}"
        " --model {wildcards.model} --out {params.scores} {params.judge} > {log} 2>&1"


rule summary:
    input:
        scores_of(["{model}"]),
    output:
        paths.summary_path("{model}"),
    log:
        "logs/summary/{model}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        scores=lambda w: paths.scores_root(BENCH_VIEW),
    shell:
        "(metrobench summary --scores {params.scores} --model {wildcards.model} --partition holdout"
        " && echo && metrobench summary --scores {params.scores} --model {wildcards.model}"
        " --partition full) > {output} 2> {log}"


# A model's results in one file (eval's results.json, its schema and fields: model, settings
# fingerprint, endpoint, data, selection, judge, Tier 1 and composite with intervals, endings,
# tokens, cost at the config's prices). A target asked for by name, not in `rule all`:
# snakemake results/models/<model>/results.json
rule results_file:
    input:
        runs=runs_of(["{model}"]),
        scores=scores_of(["{model}"]),
        verified=paths.data_verified(),
    output:
        paths.model_results("{model}"),
    log:
        "logs/results/{model}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        config=merged_config_flag(),
        runs=lambda w: paths.runs_root(BENCH_VIEW),
        scores=lambda w: paths.scores_root(BENCH_VIEW),
    shell:
        "metrobench results {params.config} --model {wildcards.model} --runs {params.runs}"
        " --scores {params.scores} --verified {input.verified} --out {output} > {log} 2>&1"

# Paper tables (CSV + Markdown) and figures (PNG), each depending only on what it reads.


rule table:
    input:
        lambda w: TABLE_INPUTS[w.table],
    output:
        csv="results/{table}.csv",
        md="results/{table}.md",
    log:
        "logs/report/{table}.log",
    wildcard_constraints:
        table=_alternatives(TABLE_INPUTS),
    conda:
        "../envs/cpu.yaml"
    params:
        config=config_flags(),
    shell:
        "metrobench tables --scores results/scores {params.config} --out results"
        " --only {wildcards.table} > {log} 2>&1"


rule figure:
    input:
        lambda w: TABLE_INPUTS[FIGURE_SOURCE[w.figure]],
    output:
        "results/{figure}.png",
    log:
        "logs/report/{figure}.log",
    wildcard_constraints:
        figure=_alternatives(FIGURE_SOURCE),
    conda:
        "../envs/cpu.yaml"
    params:
        config=config_flags(),
    shell:
        "metrobench tables --scores results/scores {params.config} --out results"
        " --only {wildcards.figure} > {log} 2>&1"


rule errata_table:
    input:
        expand(
            "results/runs/{model}/{system}.jsonl",
            model=STATS.get("errata_models") or ["rule-agent"],
            system=SYSTEMS,
        ),
    output:
        "results/errata.csv",
    log:
        "logs/report/errata.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        models=" ".join(
            f"--model {m}" for m in STATS.get("errata_models") or ["rule-agent"]
        ),
    shell:
        "metrobench errata-table {params.data} --runs results/runs {params.models} --out {output}"
        " > {log} 2>&1"

# Paper tables (CSV + Markdown) and figures (PNG), each depending only on what it reads,
# each registered for `snakemake --report` with its caption (workflow/report/); and the
# case viewer (`metrobench view`), a static site of the viewed models' cases.


rule table:
    input:
        lambda w: TABLE_INPUTS[w.table],
    output:
        csv=report(
            layout.table_path("{table}"),
            caption="../report/table.rst",
            category="Tables",
            subcategory="{table}",
            labels={"table": "{table}", "format": "CSV"},
        ),
        md=report(
            layout.table_path("{table}", suffix=".md"),
            caption="../report/table.rst",
            category="Tables",
            subcategory="{table}",
            labels={"table": "{table}", "format": "Markdown"},
        ),
    log:
        "logs/report/{table}.log",
    wildcard_constraints:
        table=_alternatives(TABLE_INPUTS),
    conda:
        "../envs/cpu.yaml"
    params:
        config=merged_config_flag(),
        scores=lambda w: layout.scores_root(tier1=w.table in TIER1_TABLES),
        out=lambda w: layout.RESULTS,
    shell:
        "metrobench tables --scores {params.scores} {params.config} --out {params.out}"
        " --only {wildcards.table} > {log} 2>&1"


rule figure:
    input:
        lambda w: TABLE_INPUTS[FIGURE_SOURCE[w.figure]],
    output:
        report(
            layout.table_path("{figure}", suffix=".png"),
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "logs/report/{figure}.log",
    wildcard_constraints:
        figure=_alternatives(FIGURE_SOURCE),
    conda:
        "../envs/cpu.yaml"
    params:
        config=merged_config_flag(),
        scores=lambda w: layout.scores_root(
            tier1=FIGURE_SOURCE[w.figure] in TIER1_TABLES
        ),
        out=lambda w: layout.RESULTS,
    shell:
        "metrobench tables --scores {params.scores} {params.config} --out {params.out}"
        " --only {wildcards.figure} > {log} 2>&1"


rule errata_table:
    input:
        expand(
            layout.run_path("{model}", "{system}"),
            model=STATS.errata_models or ["rule-agent"],
            system=SYSTEMS,
        ),
    output:
        csv=report(
            layout.table_path("errata"),
            caption="../report/errata.rst",
            category="Tables",
            subcategory="errata",
            labels={"table": "errata", "format": "CSV"},
        ),
        md=report(
            layout.table_path("errata", suffix=".md"),
            caption="../report/errata.rst",
            category="Tables",
            subcategory="errata",
            labels={"table": "errata", "format": "Markdown"},
        ),
    log:
        "logs/report/errata.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        models=" ".join(f"--model {m}" for m in STATS.errata_models or ["rule-agent"]),
    shell:
        "metrobench errata-table {params.data} --runs results/runs {params.models} --out {output.csv}"
        " > {log} 2>&1"


rule view:
    input:
        runs=expand(
            layout.run_path("{model}", "{system}"), model=VIEW_MODELS, system=SYSTEMS
        ),
        scores=scores_of(VIEW_MODELS),
    output:
        directory("results/view"),
    log:
        "logs/report/view.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        models=" ".join(f"--model {m}" for m in VIEW_MODELS),
    shell:
        "metrobench view {params.data} --runs results/runs --scores results/scores {params.models}"
        " --out {output} > {log} 2>&1"

# Paper tables (CSV + Markdown) and figures (PNG), each depending only on what it reads,
# each registered for `snakemake --report` with its caption (workflow/report/); and the
# case viewer (`metrobench view`), a static site of the viewed models' cases.


rule table:
    input:
        lambda w: TABLE_INPUTS[w.table],
    output:
        csv=report(
            paths.table_path("{table}"),
            caption="../report/table.rst",
            category="Tables",
            subcategory="{table}",
            labels={"table": "{table}", "format": "CSV"},
        ),
        md=report(
            paths.table_path("{table}", suffix=".md"),
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
        scores=lambda w: table_scores(w.table),
        out=lambda w: paths.root,
    shell:
        "metrobench tables --scores {params.scores} {params.config} --out {params.out}"
        " --only {wildcards.table} > {log} 2>&1"


rule figure:
    input:
        lambda w: TABLE_INPUTS[FIGURE_SOURCE[w.figure]],
    output:
        report(
            paths.table_path("{figure}", suffix=".png"),
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
        scores=lambda w: table_scores(FIGURE_SOURCE[w.figure]),
        out=lambda w: paths.root,
    shell:
        "metrobench tables --scores {params.scores} {params.config} --out {params.out}"
        " --only {wildcards.figure} > {log} 2>&1"


rule errata_table:
    input:
        # It rescores every case of these runs (their all view) under each erratum.
        runs_of(ERRATA_MODELS, ERRATA_VIEW),
    output:
        csv=report(
            paths.table_path("errata"),
            caption="../report/errata.rst",
            category="Tables",
            subcategory="errata",
            labels={"table": "errata", "format": "CSV"},
        ),
        md=report(
            paths.table_path("errata", suffix=".md"),
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
        runs=lambda w: paths.runs_root(ERRATA_VIEW),
        models=" ".join(f"--model {m}" for m in ERRATA_MODELS),
    shell:
        "metrobench errata-table {params.data} --runs {params.runs} {params.models} --out {output.csv}"
        " > {log} 2>&1"


rule protocol_options:
    input:
        # what each protocol option changed in these runs, and Tier 1 with it undone
        runs_of(PROTOCOL_MODELS),
    output:
        csv=report(
            paths.table_path("protocol_options"),
            caption="../report/protocol_options.rst",
            category="Tables",
            subcategory="protocol options",
            labels={"table": "protocol_options", "format": "CSV"},
        ),
        md=report(
            paths.table_path("protocol_options", suffix=".md"),
            caption="../report/protocol_options.rst",
            category="Tables",
            subcategory="protocol options",
            labels={"table": "protocol_options", "format": "Markdown"},
        ),
    log:
        "logs/report/protocol_options.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        runs=lambda w: paths.runs_root(BENCH_VIEW),
        models=" ".join(f"--model {m}" for m in PROTOCOL_MODELS),
    shell:
        "metrobench protocol-options {params.data} --runs {params.runs} {params.models}"
        " --out {output.csv} > {log} 2>&1"


rule view:
    input:
        runs=runs_of(VIEW_MODELS),
        scores=scores_of(VIEW_MODELS),
        # the rating page of Table 1's sample (calibrate.html; workflow/rules/calibration.smk)
        calibration=paths.calibration_sample(),
    output:
        directory(paths.viewer_dir()),
    log:
        "logs/report/view.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        # the study config: the index names models by their leaderboard labels
        config=merged_config_flag(),
        runs=lambda w: paths.runs_root(BENCH_VIEW),
        scores=lambda w: paths.scores_root(BENCH_VIEW),
        models=" ".join(f"--model {m}" for m in VIEW_MODELS),
    shell:
        "metrobench view {params.data} {params.config} --runs {params.runs} --scores {params.scores}"
        " {params.models}"
        " --calibration {input.calibration} --out {output} > {log} 2>&1"

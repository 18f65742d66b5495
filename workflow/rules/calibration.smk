# Table 1, the judge's calibration (metrobench/calibration/): the sample of case-rubric pairs,
# the configured judges' ratings of it (through the judge cache beside the sample) and the
# agreement of every pair of raters, people's ratings (calibration.ratings) included.

CALIBRATION = STUDY.calibration
# What the sample is made from: the verified data, and for a draw the model's scores and runs.
CALIBRATION_INPUTS = [paths.data_verified()] + (
    scores_of([CALIBRATION.model]) + runs_of([CALIBRATION.model])
    if CALIBRATION.sample == "select"
    else []
)


rule calibration_sample:
    input:
        CALIBRATION_INPUTS,
    output:
        paths.calibration_sample(),
    log:
        "logs/report/calibration_sample.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        config=merged_config_flag(),
        select=lambda w: (
            f"--scores {paths.scores_root(BENCH_VIEW)} --runs {paths.runs_root(BENCH_VIEW)}"
            if CALIBRATION.sample == "select"
            else ""
        ),
    shell:
        "metrobench calibration-sample {params.data} {params.config} {params.select}"
        " --out {output} > {log} 2>&1"


rule table1:
    input:
        sample=paths.calibration_sample(),
        ratings=list(CALIBRATION.ratings),
    output:
        csv=report(
            paths.table_path("table1"),
            caption="../report/table1.rst",
            category="Tables",
            subcategory="table1",
            labels={"table": "table1", "format": "CSV"},
        ),
        md=report(
            paths.table_path("table1", suffix=".md"),
            caption="../report/table1.rst",
            category="Tables",
            subcategory="table1",
            labels={"table": "table1", "format": "Markdown"},
        ),
        judges=paths.calibration_judges(),
    log:
        "logs/report/table1.log",
    conda:
        "../envs/cpu.yaml"
    params:
        data=data_flag(),
        config=merged_config_flag(),
    shell:
        "metrobench table1 {params.data} {params.config} --sample {input.sample}"
        " --out {output.csv} --judge-ratings {output.judges} > {log} 2>&1"

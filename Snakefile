# metrobench: the MetroLLM-Bench study as one Snakemake workflow.
# Rules live in workflow/rules/ by stage; logic lives in the metrobench package.


from snakemake.utils import min_version

min_version("8.0")


# The paper's study by default; a config given with --configfile (e.g. the CPU demo,
# config/demo.yaml) replaces it instead of being merged into it.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# `snakemake --report results/report.html`: this description, then every table and
# figure the run made, each with its caption from workflow/report/.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/teacher.smk"
include: "workflow/rules/peft.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/calibration.smk"
include: "workflow/rules/publish.smk"


rule all:
    input:
        paths.split_path(),
        paths.summary_path(RULE_AGENT),
        expand(
            paths.summary_path("{model}"),
            model=STUDY.bench.run,
        ),
        [paths.result(target) for target in STUDY.report_targets()],

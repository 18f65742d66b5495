# The distillation training set: the teachers' train-partition views (runs.smk; a teacher
# that is a benchmarked row shares its case runs with its benchmark row), scored Tier 1
# only, filtered (Tier 1 >= threshold, every turn ending on an accepted submission, one
# trace per case). The rule agent teaches in its teacher mode (the stops the kiosk
# accepts); its baseline mode is the benchmark's baseline row.


rule trainset:
    input:
        scores_of(TEACHERS, TEACHER_VIEW, layout.TIER1),
        split=paths.split_path(),
        recipes=sorted({spec.recipe for spec in STUDENTS.values()}),
    output:
        dataset=paths.teacher_dataset(),
        table=paths.teacher_composition(),
    log:
        "logs/teacher/trainset.log",
    conda:
        "../envs/train.yaml"
    params:
        data=data_flag(),
        scores=lambda w: paths.scores_root(TEACHER_VIEW, layout.TIER1),
        runs=lambda w: paths.runs_root(TEACHER_VIEW),
        recipes=lambda w, input: " ".join(f"--recipe {r}" for r in input.recipes),
        teachers=",".join(TEACHERS),
        min_tier1=STUDY.trainset.min_tier1,
    shell:
        "metrobench trainset {params.data} --scores {params.scores} --runs {params.runs}"
        " --teachers {params.teachers} --min-tier1 {params.min_tier1} --split {input.split}"
        " --out {output.dataset} --composition {output.table} {params.recipes} > {log} 2>&1"

# One trained student's folder as the paper published its students (metrobench publish, dry run):
# the Q4_K_M GGUF, the adapter, training_summary.json and a model card from Tables 4 and 8.
# A target per student, results/publish/<size>/seed<N>; never part of `all` or a report target.
# Uploading is a person's act: `metrobench publish --push --repo OWNER/NAME` (docs/paper-study.md).


rule publish:
    input:
        table4=paths.table_path("table4"),
        table8=paths.table_path("table8"),
        gguf=paths.quantized_gguf("{size}", "{seed}"),
        sizes=paths.gguf_sizes("{size}", "{seed}"),
        adapter=paths.adapter_dir("{size}", "{seed}"),
    output:
        directory(paths.publish_dir("{size}", "{seed}")),
    log:
        "logs/publish/{size}/seed{seed}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        config=merged_config_flag(),
    shell:
        "metrobench publish {params.config} --size {wildcards.size} --seed {wildcards.seed}"
        " --out {output} > {log} 2>&1"

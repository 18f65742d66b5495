# One QLoRA student per size and seed: train -> merge -> GGUF f16 -> Q4_K_M.


rule train:
    input:
        unpack(base_inputs),
        dataset=paths.teacher_dataset(),
        recipe=lambda w: STUDENTS[w.size].recipe,
    output:
        directory(paths.adapter_dir("{size}", "{seed}")),
    log:
        "logs/peft/{size}/seed{seed}/train.log",
    benchmark:
        paths.benchmark_path("peft/{size}/seed{seed}/train")
    conda:
        TRAIN_ENV
    threads: train_threads
    resources:
        gpu=1,
        gpu_mem_mib=train_gpu_mib,
    params:
        work=lambda w: paths.train_work(w.size, w.seed),
        revision=revision_flag,
        caps=train_caps,
    shell:
        "OMP_NUM_THREADS={threads} metrobench train --recipe {input.recipe} --dataset {input.dataset}"
        " --seed {wildcards.seed}"
        " --out {output} --work {params.work} {params.revision} {params.caps} > {log} 2>&1"


rule merge:
    input:
        unpack(base_inputs),
        adapter=paths.adapter_dir("{size}", "{seed}"),
        recipe=lambda w: STUDENTS[w.size].recipe,
    output:
        intermediate(directory(paths.merged_dir("{size}", "{seed}"))),
    log:
        "logs/peft/{size}/seed{seed}/merge.log",
    benchmark:
        paths.benchmark_path("peft/{size}/seed{seed}/merge")
    conda:
        "../envs/train.yaml"
    resources:
        mem_mb=merge_mem_mb,
    params:
        revision=revision_flag,
    shell:
        "metrobench merge --recipe {input.recipe} --adapter {input.adapter} --out {output}"
        " {params.revision} > {log} 2>&1"


rule gguf:
    input:
        paths.merged_dir("{size}", "{seed}"),
    output:
        intermediate(paths.f16_gguf("{size}", "{seed}")),
    log:
        "logs/peft/{size}/seed{seed}/gguf.log",
    benchmark:
        paths.benchmark_path("peft/{size}/seed{seed}/gguf")
    conda:
        "../envs/train.yaml"
    params:
        llama_cpp=llama_cpp_flag(),
    shell:
        "metrobench export-gguf --model {input} --out {output} {params.llama_cpp} > {log} 2>&1"


rule quantize:
    input:
        paths.f16_gguf("{size}", "{seed}"),
    output:
        gguf=paths.quantized_gguf("{size}", "{seed}"),
        sizes=paths.gguf_sizes("{size}", "{seed}"),
    log:
        "logs/peft/{size}/seed{seed}/quantize.log",
    conda:
        "../envs/train.yaml"
    params:
        llama_cpp=llama_cpp_flag(),
    shell:
        "metrobench quantize --gguf {input} --out {output.gguf} --sizes {output.sizes}"
        " {params.llama_cpp} > {log} 2>&1"

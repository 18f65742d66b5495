"""Train, merge, convert and quantise one student: python peft/student.py --recipe R --seed S ..."""

import argparse
import subprocess
import sys
from pathlib import Path

from metrobench import layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True, help="e.g. results/peft/4b/seed42 (metrobench.layout.peft_dir)")
    args = parser.parse_args()
    out = Path(args.out)
    adapter, merged = out / layout.ADAPTER, out / layout.MERGED
    f16, quantized = out / layout.F16_GGUF, out / layout.QUANTIZED_GGUF
    steps = [
        ["train", "--recipe", args.recipe, "--dataset", args.dataset, "--seed", str(args.seed),
         "--out", str(adapter)],
        ["merge", "--recipe", args.recipe, "--adapter", str(adapter), "--out", str(merged)],
        ["export-gguf", "--model", str(merged), "--out", str(f16)],
        ["quantize", "--gguf", str(f16), "--out", str(quantized), "--sizes", str(out / layout.GGUF_SIZES)],
    ]
    for step in steps:
        subprocess.run([sys.executable, "-m", "metrobench", *step], check=True)


if __name__ == "__main__":
    main()

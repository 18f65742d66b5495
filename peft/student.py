"""Train, merge, convert and quantise one student: python peft/student.py --recipe R --seed S ..."""

import argparse
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True, help="e.g. results/peft/4b/seed42")
    args = parser.parse_args()
    out = Path(args.out)
    steps = [
        ["train", "--recipe", args.recipe, "--dataset", args.dataset, "--seed", str(args.seed),
         "--out", str(out / "adapter")],
        ["merge", "--recipe", args.recipe, "--adapter", str(out / "adapter"), "--out", str(out / "merged")],
        ["export-gguf", "--model", str(out / "merged"), "--out", str(out / "model-f16.gguf")],
        ["quantize", "--gguf", str(out / "model-f16.gguf"), "--out", str(out / "model-Q4_K_M.gguf"),
         "--sizes", str(out / "gguf_sizes.json")],
    ]
    for step in steps:
        subprocess.run([sys.executable, "-m", "metrobench", *step], check=True)


if __name__ == "__main__":
    main()

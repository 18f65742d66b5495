"""Install the GPU kit's wheels into a temporary folder for this interpreter, leaving the image as it is.

    python scripts/gpu-kit/install_kit.py KIT SITE RECORD.json

``SITE`` goes first on ``PYTHONPATH``, so what is installed there wins over the
image. The packages the measurement is about (trl, datasets, bitsandbytes,
flash-linear-attention and its core) are always installed at the kit's pinned
versions; every other wheel only where the image lacks that distribution, so a
helper the image already has (its own pydantic or dill, say) is never shadowed
by another version. Nothing outside ``SITE`` is written: the image's torch and
site-packages stay untouched. ``pip install --no-deps --no-index --target`` does
the work; an image without pip gets the wheels unpacked (none of them has
scripts or data to place). The record lists what went where.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import zipfile
from pathlib import Path

ALWAYS = {"trl", "datasets", "bitsandbytes", "flash-linear-attention", "fla-core"}


def dist_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("_", "-").lower()


def installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    kit, site, record = Path(argv[0]), Path(argv[1]), Path(argv[2])
    wheels = sorted((kit / "wheels").glob("*.whl"))
    if not wheels:
        print(f"install_kit: error: {kit}/wheels: no wheels (run scripts/gpu-kit/build.sh)", file=sys.stderr)
        return 2
    chosen, present = [], {}
    for wheel in wheels:
        name, have = dist_name(wheel), installed(dist_name(wheel))
        if name in ALWAYS or have is None:
            chosen.append(wheel)
        else:
            present[name] = have
    site.mkdir(parents=True, exist_ok=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    if pip:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--no-index", "--no-compile", "--target", str(site), *map(str, chosen)],
                       check=True)
    else:
        for wheel in chosen:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
    out = {"kit": str(kit), "site": str(site), "method": "pip --target" if pip else "unpacked",
           "installed": [w.name for w in chosen], "image_has": present}
    record.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"kit: {len(chosen)} wheels into {site} ({out['method']}); the image's own: "
          + (", ".join(f"{k} {v}" for k, v in sorted(present.items())) or "none of the others"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

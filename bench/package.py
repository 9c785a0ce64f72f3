"""Artefact sizes per function and each handler's cold import from the artefacts (``make package-bench``).

Sizes: the function's folder plus the layer, unzipped (Lambda's limit: 250 MB together) and zipped
(deflate, as sam package uploads them). Cold import: ``python -S -B`` with only the artefacts on
sys.path (tests/package/lambda_child.py), median of ``--runs`` fresh processes. sam build ships no
bytecode and Lambda's code is read-only, so every cold start compiles what it imports: measured with an
empty ``pycache_prefix``; and, for comparison, with the bytecode one earlier run wrote there.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CHILD = Path(__file__).resolve().parents[1] / "tests" / "package" / "lambda_child.py"


def unzipped(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def zipped(folder: Path) -> int:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                zf.write(p, p.relative_to(folder))
    return len(buf.getvalue())


def cold_import(build: Path, function: str, layer: Path, pycache: Path, *, write: bool = False) -> float:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "AWS_DEFAULT_REGION": "us-east-1"}
    flags = ["-S", "-X", f"pycache_prefix={pycache}", *([] if write else ["-B"])]
    done = subprocess.run(
        [sys.executable, *flags, str(CHILD), str(build / function), str(layer)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["import_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build-dir", type=Path, default=Path(".aws-sam/build"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    build: Path = args.build_dir
    layer = build / "SharedLayer" / "python"
    functions = sorted(p.name for p in build.iterdir() if p.is_dir() and (p / "app.py").is_file())
    mib = 1 << 20
    print(f"layer: {unzipped(layer) / mib:.1f} MiB unzipped, {zipped(layer) / mib:.1f} MiB zipped")
    print("| function | code KiB | with layer, MiB unzipped | cold import, s: as shipped (no .pyc) | .pyc |")
    print("|---|---|---|---|---|")
    for function in functions:
        with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as warm:
            shipped = [cold_import(build, function, layer, Path(empty)) for _ in range(args.runs)]
            cold_import(build, function, layer, Path(warm), write=True)
            compiled = [cold_import(build, function, layer, Path(warm)) for _ in range(args.runs)]
        code = unzipped(build / function)
        total = (code + unzipped(layer)) / mib
        print(f"| {function} | {code / 1024:.1f} | {total:.1f} | {spread(shipped)} | {spread(compiled)} |")


def spread(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f})"


if __name__ == "__main__":
    main()

"""Library size and load-to-first-output time, raw vs zlib vs zstd, on the real models.

    python bench/compression.py [--models det,rec,cls,silero,magika] [--runs 3]
                                [--out bench/COMPRESSION.md]

Each model is compiled once and exported three times (``export_library(path,
compress=None | "zlib" | "zstd")``: the container's sections compressed, the code
not; the generated C is compiled to an object once and linked three times). The cold start is ``bench/cold_start.py`` in a fresh process (median of
``--runs``; ``MONOLIB_NUM_THREADS=1``): ``load_module`` (which decompresses a
compressed section into memory; a raw one is used in place from the mapped file) to
the first output in hand. Prints a Markdown table and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_inputs import MODEL_INPUTS
from run import cold_start

CODECS = (None, "zlib", "zstd")


def caching_fcompile(cache: Path):
    """An ``export_library`` ``fcompile`` that compiles the generated C once per
    distinct source (the three exports differ only in the container) and links the
    object with each export's container (the same flags as the default link)."""
    from monolib.export.embed import linker_options
    from monolib.export.toolchain import compile_objects, link_shared

    def fcompile(output: str, files: list[str], target) -> None:
        src, *rest = files
        text = Path(src).read_bytes()
        key = cache / f"{hashlib.sha256(text).hexdigest()[:16]}.c"
        if not key.with_suffix(".o").exists():
            key.write_bytes(text)
            compile_objects([str(key)], target, cwd=str(cache))
        work = os.path.dirname(output)
        opts = linker_options(work, target)
        link_shared([str(key.with_suffix(".o")), *rest], output, target, options=opts, cwd=work)

    return fcompile


def bench_model(name: str, runs: int, work: Path) -> dict:
    """``{codec: (bytes, cold seconds)}`` of one model."""
    import monolib
    from monolib.models import fetch_model

    spec = MODEL_INPUTS[name]
    feeds, _ = spec.make()
    np.savez(work / f"{name}.npz", **feeds)
    factory = monolib.compile(
        str(fetch_model(spec.key)), shapes=spec.shapes, constants=spec.constants or None
    )
    out = {}
    for codec in CODECS:
        lib = work / f"{name}_{codec or 'raw'}.so"
        factory.export_library(str(lib), compress=codec, fcompile=caching_fcompile(work))
        cold = cold_start(["monolib", str(lib), str(work / f"{name}.npz")], runs)
        out[codec or "raw"] = (lib.stat().st_size, cold["cold_s"])
        print(f"{name} {codec or 'raw'}: {out[codec or 'raw']}", file=sys.stderr, flush=True)
    return out


def table(results: dict[str, dict]) -> list[str]:
    lines = [
        (
            "| model | raw MB | zlib MB (ratio) | zstd MB (ratio) "
            "| raw load+1st ms | zlib ms | zstd ms |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        raw = r["raw"][0]
        cells = [name, f"{raw / 1e6:.2f}"]
        for codec in ("zlib", "zstd"):
            cells.append(f"{r[codec][0] / 1e6:.2f} ({r[codec][0] / raw:.2f})")
        cells += [f"{r[c][1] * 1e3:.1f}" for c in ("raw", "zlib", "zstd")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="det,rec,cls,silero,magika")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(HERE / "COMPRESSION.md"))
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            results[name] = bench_model(name, args.runs, Path(tmp))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    lines = table(results)
    print("\n".join(lines))
    head = [
        "# Compression: library size and load-to-first-output time",
        "",
        (
            f"`python bench/compression.py` on {platform.machine()}, Python "
            f"{platform.python_version()}, load average {load} when it ended; cold start = "
            f"fresh process, `load_module` to the first output, median of {args.runs}, "
            "MONOLIB_NUM_THREADS=1. Ratios are compressed / raw file size."
        ),
        "",
    ]
    Path(args.out).write_text("\n".join(head + lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""monolib's device targets against ONNX Runtime, on the PP-OCR classifier and recognizer.

    python bench/device.py [--models cls,rec] [--repeat 10]

OpenCL section: the model compiled with ``target="opencl"`` and run on OpenCL device
0 (in CI that is PoCL, a CPU driver: the figure says the path works, not that a GPU
is fast), beside ONNX Runtime's CPU provider at 1 thread; also the program build time
from source and the largest difference from ORT. GPU section (only where a CUDA GPU
and cuda-python are present): ``target="cuda -arch=sm_XY"`` for the GPU found, beside
ONNX Runtime's CUDA provider when it is installed. Latency = inputs in, run, outputs
out as NumPy (median of ``--repeat`` runs after one warm-up). Prints Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_inputs import MODEL_INPUTS

import monolib
from monolib.models import fetch_model


def _median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _ort(path: str, providers: list[str]):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=providers)


def _monolib_row(name: str, target: str, device, repeat: int, ort_providers: list[str]) -> str:
    bm = MODEL_INPUTS[name]
    feeds, ort_feeds = bm.make()
    path = str(fetch_model(bm.key))
    factory = monolib.compile(path, target=target, shapes=bm.shapes)
    t = time.perf_counter()
    gm = monolib.GraphModule(factory["default"](device))
    build = time.perf_counter() - t

    def run_monolib():
        gm.run(**feeds)
        return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]

    sess = _ort(path, ort_providers)
    ours = _median_ms(run_monolib, repeat)
    theirs = _median_ms(lambda: sess.run(None, ort_feeds), repeat)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(run_monolib(), sess.run(None, ort_feeds)))
    return (f"| {name} | {target} | {build:.1f} s | {ours:.2f} ms | {ort_providers[0]} "
            f"{theirs:.2f} ms | {ours / theirs:.2f} | {diff:.2e} |")


def _gpu_arch() -> str | None:
    try:
        from cuda.bindings import driver

        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return None
        dev = driver.cuDeviceGet(0)[1]
        attr = driver.CUdevice_attribute
        major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001  (no driver, no bindings: no GPU section)
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cls,rec")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    names = args.models.split(",")
    head = ("| model | target | program build | monolib | ONNX Runtime | ratio | max abs diff |\n"
            "|---|---|---|---|---|---|---|")
    try:
        from monolib.runtime.opencl_module import devices

        dev = devices()[0]
        print(f"## OpenCL: {dev.platform.name} / {dev.name}\n\n{head}")
        for name in names:
            print(_monolib_row(name, "opencl", monolib.opencl(), args.repeat,
                               ["CPUExecutionProvider"]), flush=True)
    except (monolib.MonolibError, ImportError) as exc:
        print(f"## OpenCL: skipped ({exc})")
    arch = _gpu_arch()
    if arch is None:
        print("\n## CUDA: skipped (no CUDA GPU or cuda-python)")
        return
    import onnxruntime as ort

    prov = ("CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers()
            else "CPUExecutionProvider")
    print(f"\n## CUDA ({arch})\n\n{head}")
    for name in names:
        print(_monolib_row(name, f"cuda -arch={arch}", monolib.cuda(), args.repeat, [prov]),
              flush=True)


if __name__ == "__main__":
    main()

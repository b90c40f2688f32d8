#!/usr/bin/env bash
# Install everything monolib, its demo and ALL its tests need on a fresh Debian machine
# (CI runs exactly this, then the README's test command: both run the same tests).
# Debian's packages: a C compiler, the DejaVu font (rendered text for the OCR models),
# espeak-ng (synthesized speech for the Silero VAD models), headless Chromium (the
# `monolib view` page and the .wasm-in-the-browser tests), Node.js (monolib.mjs in
# Node), PoCL (a CPU OpenCL driver for the OpenCL device module), qemu-user and the arm64
# C library (the aarch64 library run for real; qemu-x86_64 -cpu Nehalem for the portable
# library). PyPI: monolib editable with its test, serving (Ray Serve, the Triton HTTP
# client) and wasm (wasmtime, zig's C toolchain) extras; NVRTC (runs without a GPU) for
# the CUDA module's compile, export and round-trip tests. Nothing from elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if command -v apt-get >/dev/null; then
  need=""
  command -v gcc >/dev/null || need="$need gcc libc6-dev"
  [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$need fonts-dejavu-core"
  command -v espeak-ng >/dev/null || need="$need espeak-ng"
  command -v chromium >/dev/null || need="$need chromium"
  command -v node >/dev/null || need="$need nodejs"
  [ -e /etc/OpenCL/vendors/pocl.icd ] || need="$need pocl-opencl-icd ocl-icd-libopencl1"
  command -v qemu-aarch64 >/dev/null || need="$need qemu-user"
  [ -d /usr/aarch64-linux-gnu/lib ] || need="$need libc6-arm64-cross"
  if [ -n "$need" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test,serve,wasm]" \
  "cuda-python>=12.9,<13" "nvidia-cuda-nvrtc-cu12>=12.9"

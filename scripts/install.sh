#!/usr/bin/env bash
# Install everything monolib, its tests and its demo need on a fresh Debian machine.
# System packages: a C compiler, the DejaVu font (rendered text for the OCR models),
# espeak-ng (synthesized speech for the Silero VAD models). Python: monolib itself
# with its test extras, editable.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if command -v apt-get >/dev/null; then
  need=""
  command -v gcc >/dev/null || need="$need gcc libc6-dev"
  [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$need fonts-dejavu-core"
  command -v espeak-ng >/dev/null || need="$need espeak-ng"
  if [ -n "$need" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]"

"""Magika file-type classifier (int32 byte features in): compiled, exported, run in a
fresh process, compared with ONNX Runtime, and checked for meaning: a Python source
file is python, a WAV file is wav, an ELF binary is elf."""

import sys
from pathlib import Path

import numpy as np
import pytest

from monolib.models import fetch_model, magika, vad

pytestmark = pytest.mark.slow


def _wav_bytes(tmp: Path) -> bytes:
    import wave

    path = tmp / "tone.wav"
    t = np.arange(vad.SAMPLE_RATE // 4) / vad.SAMPLE_RATE
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(vad.SAMPLE_RATE)
        w.writeframes((np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes())
    return path.read_bytes()


def test_magika_labels_files(model_lib, fresh_run, ort_session, matches, tmp_path):
    cfg = magika.load_config(fetch_model("magika_config"))
    files = {
        "python": Path(magika.__file__).read_bytes(),
        "wav": _wav_bytes(tmp_path),
        "elf": Path(sys.executable).resolve().read_bytes(),
    }
    lib = model_lib("magika")
    sess = ort_session("magika")
    for label, content in files.items():
        feats = magika.magika_features(content, cfg)
        assert feats.dtype == np.int32 and feats.shape == (1, 2048)
        got = fresh_run(lib, {"bytes": feats})
        want = sess.run(None, {"bytes": feats})
        matches(got, want, f"Magika ({label})")
        assert magika.magika_label(got[0], cfg) == label

"""Meaningful inputs for Silero VAD: speech synthesized with ``espeak-ng``, padded
with silence, cut into the model's 16 kHz chunks.

Silero VAD v5+ (``silero_vad/utils_vad.py``, ``OnnxWrapper``) reads 512 new samples
per step at 16 kHz, preceded by the last 64 samples of the previous step (zeros for
the first step): the model input is ``[N, 576]``. The streaming model carries its
``state`` ``[2, N, 128]`` from one step to the next.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import MonolibError

__all__ = [
    "CHUNK",
    "CONTEXT",
    "SAMPLE_RATE",
    "resample",
    "speech_with_silence",
    "stream_vad",
    "synthesize_speech",
    "vad_chunks",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
CHUNK = 512
CONTEXT = 64


def resample(audio: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Linear-interpolation resampling of a mono float signal (good enough for a VAD
    input; no anti-aliasing filter)."""
    if rate_in == rate_out:
        return audio.astype(np.float32)
    n_out = round(len(audio) * rate_out / rate_in)
    t_out = np.arange(n_out) * (rate_in / rate_out)
    return np.interp(t_out, np.arange(len(audio)), audio).astype(np.float32)


def synthesize_speech(text: str, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Speak ``text`` with ``espeak-ng`` (Debian package ``espeak-ng``).

    Returns
    -------
    numpy.ndarray
        float32 mono samples in [-1, 1] at ``rate`` Hz.

    Raises
    ------
    MonolibError
        ``espeak-ng`` is not installed or failed.
    """
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise MonolibError("espeak-ng is not installed (Debian package espeak-ng)")
    with tempfile.TemporaryDirectory(prefix="monolib-tts-") as tmp:
        wav = Path(tmp) / "speech.wav"
        proc = subprocess.run([exe, "-w", str(wav), text], capture_output=True, text=True,
                              timeout=60, check=False)
        if proc.returncode != 0 or not wav.exists():
            raise MonolibError(f"espeak-ng failed (exit {proc.returncode}): {proc.stderr}")
        with wave.open(str(wav)) as w:
            if w.getsampwidth() != 2:
                raise MonolibError(f"espeak-ng wrote {8 * w.getsampwidth()}-bit audio")
            raw = np.frombuffer(w.readframes(w.getnframes()), "<i2")
            raw = raw.reshape(-1, w.getnchannels()).mean(axis=1)
            rate_in = w.getframerate()
    return resample(raw / 32768.0, rate_in, rate)


def speech_with_silence(text: str, silence_s: float = 1.0) -> tuple[np.ndarray, int, int]:
    """Speech padded with ``silence_s`` seconds of silence on both sides, at 16 kHz.

    Returns
    -------
    audio : numpy.ndarray
        float32 samples.
    start, end : int
        The sample range of the speech.
    """
    speech = synthesize_speech(text)
    pad = np.zeros(int(silence_s * SAMPLE_RATE), np.float32)
    return np.concatenate([pad, speech, pad]), len(pad), len(pad) + len(speech)


def vad_chunks(audio: np.ndarray) -> np.ndarray:
    """Cut 16 kHz audio into model inputs: 512 new samples with 64 samples of context.

    Returns
    -------
    numpy.ndarray
        float32 ``[N, 576]``; row ``i`` is samples ``[512 i - 64, 512 (i + 1))`` with
        zeros before the start and after the end (the tail is zero-padded).
    """
    n = -(-len(audio) // CHUNK)
    padded = np.zeros(CONTEXT + n * CHUNK, np.float32)
    padded[CONTEXT:CONTEXT + len(audio)] = audio
    idx = np.arange(n)[:, None] * CHUNK + np.arange(CHUNK + CONTEXT)[None, :]
    return padded[idx]


StepFn = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def stream_vad(step: StepFn, chunks: np.ndarray) -> np.ndarray:
    """Run a streaming VAD step chunk by chunk, carrying the state.

    Parameters
    ----------
    step : callable
        ``step(input [1, 576], state [2, 1, 128]) -> (prob [1, 1], next state)``.
    chunks : numpy.ndarray
        ``[N, 576]`` from :func:`vad_chunks`.

    Returns
    -------
    numpy.ndarray
        float32 ``[N]`` speech probabilities.
    """
    state = np.zeros((2, 1, 128), np.float32)
    probs = np.empty(len(chunks), np.float32)
    for i, chunk in enumerate(chunks):
        prob, state = step(chunk[None], state)
        probs[i] = np.asarray(prob).reshape(-1)[0]
    return probs

"""openWakeWord's streaming pipeline with static shapes: 16 kHz audio -> mel
spectrogram (``oww_mel``) -> speech embeddings (``oww_embedding``) -> a wake-word head
(``oww_alexa``), each model called with the one input shape it has in a stream.

Follows ``openwakeword==0.4.0`` (``utils.py``, ``AudioFeatures``; ``model.py``,
``Model.predict``/``predict_clip``): audio is 16-bit PCM given to the mel model as
float32 sample values; every :data:`CHUNK` (1280) new samples, the mel model reads them
with the :data:`CONTEXT` (480) samples before them (``[1, 1760]`` -> 8 frames of 32
bands), scaled ``mel / 10 + 2``; the embedding model reads the last :data:`WINDOW` (76)
frames ``[1, 76, 32, 1]`` -> 96 features (one embedding per 8 frames, as the library's
``window_size=76, step_size=8``); the head reads the last :data:`N_EMBEDDINGS` (16)
embeddings ``[1, 16, 96]`` -> a score in [0, 1]. The clip is padded with 1 s of silence
on both sides (``predict_clip``'s ``padding``). The buffers start as openWakeWord's do:
mel frames of ones, embeddings of silence. The scores agree with openWakeWord's own
``predict_clip`` within 0.04 on a synthesized "alexa" (0.99+ on the word, 0 elsewhere).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import MonolibError

__all__ = [
    "CHUNK",
    "CONTEXT",
    "MEL_SAMPLES",
    "N_EMBEDDINGS",
    "WINDOW",
    "stream_scores",
    "to_pcm",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
#: new samples per step (80 ms)
CHUNK = 1280
#: samples before a chunk the mel model also reads (3 hops of 160)
CONTEXT = 480
MEL_SAMPLES = CHUNK + CONTEXT
#: mel frames per embedding window
WINDOW = 76
#: embeddings the head reads
N_EMBEDDINGS = 16

Model = Callable[[np.ndarray], np.ndarray]


def to_pcm(audio: np.ndarray, padding_s: float = 1.0) -> np.ndarray:
    """16-bit PCM sample values (float32) of float audio in [-1, 1], with ``padding_s``
    seconds of silence on both sides and zeros to whole chunks.

    Returns
    -------
    numpy.ndarray
        float32 ``[n * CHUNK]``, integer values in [-32767, 32767].
    """
    pcm = np.round(np.clip(np.asarray(audio, np.float32), -1.0, 1.0) * 32767.0)
    pad = np.zeros(int(padding_s * SAMPLE_RATE), np.float32)
    pcm = np.concatenate([pad, pcm.astype(np.float32), pad])
    return np.pad(pcm, (0, -len(pcm) % CHUNK))


def _mel(mel: Model, samples: np.ndarray) -> np.ndarray:
    out = np.asarray(mel(np.ascontiguousarray(samples[None], np.float32)))
    if out.ndim != 4 or out.shape[-1] != 32:
        raise MonolibError(f"mel model gave shape {out.shape}, expected [1, 1, frames, 32]")
    return out[0, 0] / 10.0 + 2.0


def _embed(embed: Model, frames: np.ndarray) -> np.ndarray:
    return np.asarray(embed(np.ascontiguousarray(frames[None, :, :, None], np.float32))).reshape(1, 96)


def stream_scores(mel: Model, embed: Model, head: Model, audio: np.ndarray,
                  record: dict | None = None) -> np.ndarray:
    """The wake-word score after each :data:`CHUNK` of ``audio``, as a stream.

    Parameters
    ----------
    mel, embed, head : callable
        ``mel(x [1, 1760]) -> [1, 1, 8, 32]``, ``embed(x [1, 76, 32, 1]) -> [1, 1, 1, 96]``,
        ``head(x [1, 16, 96]) -> [1, 1]``: the three models (any runner).
    audio : numpy.ndarray
        float mono 16 kHz samples in [-1, 1] (padded by :func:`to_pcm`).
    record : dict, optional
        When given, ``record["mel"|"embed"|"head"]`` collect every input given to each
        model, in order (to run them again through another runner).

    Returns
    -------
    numpy.ndarray
        float32 ``[len(to_pcm(audio)) // CHUNK]`` scores.
    """
    def call(name: str, fn: Model, x: np.ndarray) -> np.ndarray:
        if record is not None:
            record.setdefault(name, []).append(np.ascontiguousarray(x, np.float32))
        return fn(x)

    def mel_fn(x):
        return call("mel", mel, x)

    def embed_fn(x):
        return call("embed", embed, x)

    pcm = to_pcm(audio)
    silence = _mel(mel_fn, np.zeros(MEL_SAMPLES, np.float32))
    frames = np.ones((WINDOW, 32), np.float32)
    feats = np.repeat(_embed(embed_fn, np.repeat(silence[:1], WINDOW, axis=0)), N_EMBEDDINGS,
                      axis=0)
    history = np.zeros(CONTEXT, np.float32)
    scores = []
    for i in range(0, len(pcm), CHUNK):
        samples = np.concatenate([history, pcm[i:i + CHUNK]])
        history = samples[-CONTEXT:]
        frames = np.concatenate([frames, _mel(mel_fn, samples)])[-WINDOW:]
        feats = np.concatenate([feats, _embed(embed_fn, frames)])[-N_EMBEDDINGS:]
        score = np.asarray(call("head", head, np.ascontiguousarray(feats[None], np.float32)))
        scores.append(float(score.reshape(-1)[0]))
    return np.asarray(scores, np.float32)

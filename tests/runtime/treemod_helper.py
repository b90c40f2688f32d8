"""User-defined module types of the import-tree tests (a fresh process imports them too).

``LeafModule`` (type key ``"test_tree_leaf"``) holds a name and a number; function
``<name>()`` returns the number, so a function found with ``query_imports`` tells
which module of the tree answered. ``NodeModule`` (``"test_tree_node"``) stores two
sections and is loaded with ``sections=True``.
"""

from __future__ import annotations

import json

from monolib.runtime import Module, register_loader


class LeafModule(Module):
    type_key = "test_tree_leaf"

    def __init__(self, name: str, value: float) -> None:
        super().__init__()
        self.name, self.value = name, value

    def _get_own_function(self, name):
        return (lambda: self.value) if name == self.name else None

    def save_to_bytes(self) -> bytes:
        return json.dumps({"name": self.name, "value": self.value}).encode()


class NodeModule(Module):
    type_key = "test_tree_node"

    def __init__(self, name: str, payload: bytes) -> None:
        super().__init__()
        self.name, self.payload = name, payload

    def _get_own_function(self, name):
        return (lambda: self.payload) if name == self.name else None

    def save_sections(self):
        return {"name": self.name.encode(), "payload": self.payload}


def _load_leaf(data: memoryview) -> LeafModule:
    obj = json.loads(bytes(data))
    return LeafModule(obj["name"], obj["value"])


def _load_node(sections) -> NodeModule:
    return NodeModule(bytes(sections["name"]).decode(), bytes(sections["payload"]))


register_loader(LeafModule.type_key, _load_leaf)
register_loader(NodeModule.type_key, _load_node, sections=True)

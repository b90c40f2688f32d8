"""Property test: any module tree with any section payloads survives pack -> parse,
through export_library's own numbering of the tree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monolib.export.library import collect_modules
from monolib.abi.container import PAYLOAD_ALIGN, Container, pack_container
from monolib.runtime.module import Module


class Blob(Module):
    type_key = "blob"

    def __init__(self, sections: dict[str, bytes]) -> None:
        super().__init__()
        self.sections = sections

    def save_sections(self):
        return self.sections


section_dicts = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=6), st.binary(max_size=300), max_size=3
)


@st.composite
def trees(draw):
    """A root, then each new module imported by a random earlier one (a DAG is fine:
    a module may also be imported twice)."""
    n = draw(st.integers(1, 8))
    mods = [Blob(draw(section_dicts)) for _ in range(n)]
    for i in range(1, n):
        parent = draw(st.integers(0, i - 1))
        mods[parent].import_module(mods[i])
        if draw(st.booleans()) and i >= 2:
            other = draw(st.integers(0, i - 1))
            if other != parent:
                mods[other].import_module(mods[i])
    return mods[0]


@settings(max_examples=60, deadline=None)
@given(root=trees(), codec=st.sampled_from([None, "zlib", "zstd"]))
def test_tree_and_sections_round_trip(root, codec):
    modules, row_ptr, child = collect_modules(root)
    blob = pack_container(
        [(m.type_key, m.save_sections()) for m in modules],
        import_tree=(row_ptr, child),
        compress=codec,
    )
    c = Container(blob, verify=True)
    assert c.root == 0 and len(c.modules) == len(modules)
    index = {id(m): i for i, m in enumerate(modules)}
    for i, m in enumerate(modules):
        assert c.children(i) == [index[id(k)] for k in m.imported_modules]
        got = {k: bytes(v) for k, v in c.sections_of(i).items()}
        assert got == dict(m.save_sections())  # the sections plus the loader hint
        assert all(s.offset % PAYLOAD_ALIGN == 0 for s in c.modules[i].sections)

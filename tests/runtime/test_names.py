"""abi/names.py: the names the exporter, the runtime and the C header agree on."""

from __future__ import annotations

import re

from monolib.abi import names
from monolib.export.capi import header_text
from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule
from monolib.runtime.cuda_module import CUDAModule
from monolib.runtime.dso import DSOModule
from monolib.runtime.module import registered_type_keys
from monolib.runtime.opencl_module import OpenCLModule


def test_the_header_declares_exactly_the_c_api_and_the_low_level_abi():
    declared = set(re.findall(r"MONOLIB_API\s+[^;(]*?\b(monolib_\w+)\s*\(", header_text()))
    assert declared == set(names.CAPI_SYMBOLS) | set(names.LOW_LEVEL_SYMBOLS)


def test_module_classes_use_the_type_keys():
    assert GraphExecutorFactoryModule.type_key == names.FACTORY
    assert DSOModule.type_key == names.LIBRARY
    assert CSourceModule.type_key == names.C_SOURCE
    assert OpenCLModule.type_key == names.OPENCL
    assert CUDAModule.type_key == names.CUDA
    assert {names.FACTORY, names.OPENCL, names.CUDA} <= set(registered_type_keys())
    assert {names.OPENCL, names.CUDA, names.DEVICE} <= names.DEVICE_TYPE_KEYS


def test_section_names_per_binary_format():
    assert names.SECTION_NAME == ".monolib"
    assert set(names.SECTION_NAMES) == {"ELF", "PE", "Mach-O"}
    assert names.CONTAINER_SYMBOLS == (names.CONTAINER_START, names.CONTAINER_END)

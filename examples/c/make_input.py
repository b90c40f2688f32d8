"""Write the input of the C example: a rendered text line, preprocessed for the
PP-OCR line classifier (float32 [1, 3, 48, 192], raw bytes, C order), and Python's
outputs for it, to compare with the C program's.

    python make_input.py cls.so     # writes x.bin and expected.0.bin
"""

import sys

import numpy as np

from monolib import load_module
from monolib.models import ocr
from monolib.runtime.graph_module import GraphModule

x = ocr.line_preprocess(ocr.render_line("Hello World 2024"), 48, 192).astype(np.float32)
x.tofile("x.bin")
model = GraphModule(load_module(sys.argv[1]).default())
model.set_input(0, x)
model.run()
model.get_output(0).numpy().tofile("expected.0.bin")
print("wrote x.bin", x.shape, "and expected.0.bin", model.get_output(0).numpy())

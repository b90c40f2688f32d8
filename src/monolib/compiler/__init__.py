"""The compiler: ONNX frontend -> graph IR -> passes -> C codegen -> module tree."""

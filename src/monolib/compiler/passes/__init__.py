"""monolib.compiler.passes"""

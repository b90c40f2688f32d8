"""monolib.compiler.frontend"""

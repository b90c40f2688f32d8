"""monolib.compiler.codegen"""

"""tensor operators (each file registers its ops)."""

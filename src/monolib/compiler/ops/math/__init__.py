"""math operators (each file registers its ops)."""

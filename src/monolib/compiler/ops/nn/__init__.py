"""nn operators (each file registers its ops)."""

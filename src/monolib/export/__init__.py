"""Export: toolchains, targets, embedding the container, export_library steps."""

"""Command-line interface (click): thin shells over the Python API."""

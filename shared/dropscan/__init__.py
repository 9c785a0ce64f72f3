"""dropscan: audit GPL source drops against trusted upstream releases."""

__version__ = "0.1.0"

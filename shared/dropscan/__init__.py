"""dropscan: audit GPL source drops against trusted upstream releases."""

from dropscan.native import use_bundled_libarchive

__version__ = "0.1.0"

# before any module imports libarchive-c, which picks its library once, at its import
use_bundled_libarchive()

"""The command line (``dropscan``): scan, report, hash, ingest, up, demo; and the client it drives a stack
with (embedded moto, a running ``dropscan up``, or a deployed stack)."""

from dropscan.cli.commands import main, run

__all__ = ["main", "run"]

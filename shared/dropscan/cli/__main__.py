"""``python -m dropscan.cli``: the command line, as the ``dropscan`` script runs it."""

from dropscan.cli.commands import run

run()

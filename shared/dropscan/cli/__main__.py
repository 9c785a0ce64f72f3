"""``python -m dropscan.cli``: the command line, as the ``dropscan`` script runs it."""

import sys

from dropscan.cli.commands import main

sys.exit(main())

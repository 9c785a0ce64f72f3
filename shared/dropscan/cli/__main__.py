"""``python -m dropscan.cli``: what `dropscan up` subprocesses and the tests run."""

import sys

from dropscan.cli.commands import main

sys.exit(main())

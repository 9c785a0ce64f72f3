"""`python -m dropscan.cli`: the command line (``dropscan`` is its console script)."""

from dropscan.cli import main

raise SystemExit(main())

"""`python -m levergate.simulator ...`: the same as `levergate sim ...`."""

from __future__ import annotations

import sys

from levergate.cli.sim import main

if __name__ == "__main__":
    sys.exit(main())

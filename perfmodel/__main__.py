"""`python -m perfmodel ...` runs the command-line interface (same as the `perfmodel` script)."""

import sys

from perfmodel.cli import main

sys.exit(main())

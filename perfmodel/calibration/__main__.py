"""python -m perfmodel.calibration: the host microbenchmark (same as `perfmodel calibrate`)."""

import sys

from perfmodel.calibration.microbench import main

sys.exit(main())

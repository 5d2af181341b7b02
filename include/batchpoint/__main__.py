"""`python -m batchpoint ...`: the `batchpoint` command."""

import sys

from batchpoint.cli import main

sys.exit(main())

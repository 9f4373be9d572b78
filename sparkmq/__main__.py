"""``python -m sparkmq``: the same command line as the ``sparkmq`` console script."""

from __future__ import annotations

import sys

from sparkmq.cli.main import main

sys.exit(main())

"""The main job; a placeholder until the real pipeline is written."""

from __future__ import annotations

import sys


def main() -> int:
    """Say that the main job is not written yet and succeed."""
    print("main job not yet written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

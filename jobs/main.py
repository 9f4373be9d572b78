"""The main job that ``make run`` runs: for now the store demo (``jobs/store_demo.py``).

It grows into the Spark pipeline (sink → broker → source → Delta) as the broker and Spark
parts land.
"""

from __future__ import annotations

from jobs.store_demo import main

if __name__ == "__main__":
    raise SystemExit(main(["--fresh"]))

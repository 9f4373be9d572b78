"""The main job ``make run`` runs: order events through sparkmq into Delta (``orders_pipeline``)."""

from __future__ import annotations

from jobs.orders_pipeline import main

if __name__ == "__main__":
    raise SystemExit(main(["--fresh"]))

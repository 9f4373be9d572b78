"""A Spark driver in its own process, for crash tests: read a topic, write each batch's rows to a file.

Each micro-batch's rows go to ``OUT/batch-<id>.json`` through ``support.spark_harness.BatchFiles``
(idempotent per batchId; a replayed batch is compared with what it wrote before). Progress lines
(``started``, ``batch <id> <rows>``, ``replay <id> same|DIFFERENT``) go to stdout.

    python tests/spark/stream_driver.py --namesrv 127.0.0.1:9876 --topic T --group G \\
        --checkpoint /tmp/ck --out /tmp/out --max-per-trigger 5 [--available-now] [--pause 0.3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (for support.*)

from support.spark_harness import BatchFiles, build_session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-per-trigger", type=int, required=True)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to sleep after writing each batch")
    args = parser.parse_args()

    spark = build_session("sparkmq-stream-driver")
    stream = (
        spark.readStream.format("sparkmq")
        .option("namesrvAddr", args.namesrv)
        .option("topic", args.topic)
        .option("consumerGroup", args.group)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .load()
    )
    files = BatchFiles(args.out, lambda line: print(line, flush=True), args.pause)
    writer = stream.writeStream.foreachBatch(files).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

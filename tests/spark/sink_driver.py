"""A Spark driver in its own process, for sink crash tests: text files in, sparkmq sink out.

Each line of the files under ``--input`` becomes one message body; ``--files-per-trigger``
files make one micro-batch. Prints ``started`` and, when the query ends, ``done``.

    python tests/spark/sink_driver.py --namesrv 127.0.0.1:9876 --input /tmp/in --topic T \\
        --checkpoint /tmp/ck --files-per-trigger 2 [--guarantee exactly-once] [--available-now]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (for support.*)

from support.spark_harness import build_session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--files-per-trigger", type=int, required=True)
    parser.add_argument("--guarantee", default="exactly-once")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    spark = build_session("sparkmq-sink-driver")
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", str(args.files_per_trigger)).load(args.input)
    writer = (
        lines.withColumnRenamed("value", "body")
        .writeStream.format("sparkmq")
        .option("namesrvAddr", args.namesrv)
        .option("topic", args.topic)
        .option("deliveryGuarantee", args.guarantee)
        .option("checkpointLocation", args.checkpoint)
    )
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

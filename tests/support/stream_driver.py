"""A streaming query into a table through wapflow's stream sink, in a process of its own, for kill tests.

    python stream_driver.py CONFIG TABLE LANDING CHECKPOINT [PUBLISH_EVERY]

Reads the parquet files in LANDING (Spark's file source, one file per batch) into TABLE until there is nothing
left (trigger availableNow), each batch one WAP run; prints a line per batch ("stream batch N: STATUS ...").
PUBLISH_EVERY: one run per that many batches (staged in the checkpoint until then).
Exits 0 when every batch is done, else the exit code of the batch that stopped the query.
"""

from __future__ import annotations

import sys

import wapflow

SCHEMA = "id long, fare double"


def main(argv: list[str]) -> int:
    config, table, landing, checkpoint, *rest = argv
    publish_every = int(rest[0]) if rest else 1
    lh = wapflow.connect(config, progress=lambda m: print(m, flush=True))
    src = lh.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(landing)
    stream = wapflow.start_stream(
        lh, src, table, checkpoint=checkpoint, trigger="available_now", publish_every=publish_every
    )
    try:
        stream.await_termination()
    except wapflow.StreamStopped as e:
        print(f"stopped: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    print(f"query {stream.query.id} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

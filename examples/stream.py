"""A Structured Streaming query into an Iceberg table through WAP: every micro-batch audited before main sees it.

python examples/stream.py wap.toml landing/trips checkpoints/trips [--once]

Spark's file source reads the parquet files landing in the folder (they must land whole: write, then rename);
each micro-batch is written to a branch, audited with the table's checks in wap.toml and published, exactly
once across restarts from the checkpoint. A batch failing its checks stops the query (exit 1), its rows kept on
a branch; after fixing the checks (or to skip it: on_blocked="skip"), run this again: it goes on from there.
--once: what has landed, then stop (trigger availableNow); else a batch every 10 seconds until stopped.
"""

import sys

import wapflow


def main(config: str, landing: str, checkpoint: str, once: bool = False) -> int:
    lh = wapflow.connect(config, progress=lambda line: print(line, file=sys.stderr))
    schema = lh.spark.read.parquet(landing).schema  # a stream's schema is fixed: taken from what landed so far
    trips = lh.spark.readStream.schema(schema).parquet(landing)
    trigger = "available_now" if once else "10 seconds"
    stream = wapflow.start_stream(lh, trips, "nyc.trips", checkpoint=checkpoint, trigger=trigger)
    try:
        stream.await_termination()
    except wapflow.StreamStopped as e:
        print(e, file=sys.stderr)  # which batch, which checks, where its rows are, what to do
        return e.exit_code
    for res in stream.results:
        print(f"{res.status} {res.run_id} rows={res.rows_written}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], once="--once" in sys.argv[4:]))

"""The training run behind `wap setup`'s JVM class archive (wapflow.lakehouse.class_archive), as its own process.

One WAP run on a throwaway embedded lakehouse loads the classes a command loads; then Spark is stopped and its
JVM waited for while it writes the archive (`-XX:ArchiveClassesAtExit`, set by class_archive.java_options from
the environment). Exit 0 only when that JVM exited 0: the caller renames the archive into place only then.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from wapflow.lakehouse import class_archive


def main() -> int:
    """The training run (this module as a process, `class_archive.TRAINING` set): one WAP run on a throwaway embedded
    lakehouse, loading the classes a command loads, then Spark stopped and its JVM waited for while it writes
    the archive. Exit 0 only when that JVM exited 0."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import SparkContext

    import wapflow
    from wapflow import checks as C

    with tempfile.TemporaryDirectory(prefix="wap-class-archive-") as tmp:
        work = Path(tmp)
        os.chdir(work)  # no ./wap.toml of the caller's: the embedded default lakehouse
        data = work / "batch.parquet"
        n = 2000
        pq.write_table(
            pa.table(
                {
                    "id": pa.array(range(n), pa.int64()),
                    "name": pa.array([f"n{i % 97}" for i in range(n)]),
                    "amount": pa.array([i * 0.5 for i in range(n)], pa.float64()),
                    "at": pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us")),
                }
            ),
            data,
        )
        lh = wapflow.connect(None, warehouse=str(work / "lakehouse"), driver_memory="1g", engine="off")
        checks = [C.not_null("id"), C.unique("id"), C.row_count(min=1)]
        res = wapflow.run(lh, "train.batch", [data], checks=checks)
        if res.status != "published":
            print(f"training run ended {res.status}: {res.message}", file=sys.stderr)  # noqa: T201
        lh.spark.table(f"{lh.config.lakehouse.catalog_name}.train.batch").where("amount > 10").count()
        gateway = SparkContext._gateway
        lh.spark.stop()
        if gateway is None or getattr(gateway, "proc", None) is None:
            print("no JVM process to wait for", file=sys.stderr)  # noqa: T201
            return 1
        proc = gateway.proc
        gateway.shutdown()
        if proc.stdin is not None:
            proc.stdin.close()  # Spark's gateway exits on end of input: System.exit, which writes the archive
        code = proc.wait(timeout=class_archive.TRAIN_TIMEOUT)
        if code != 0:
            print(f"the JVM exited {code}", file=sys.stderr)  # noqa: T201
        return int(code)


if __name__ == "__main__":
    if not os.environ.get(class_archive.TRAINING):
        sys.exit(f"run through `wap setup` (it sets {class_archive.TRAINING})")
    sys.exit(main())

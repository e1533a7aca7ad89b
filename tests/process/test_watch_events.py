"""`wap watch` fed by S3 ObjectCreated events: a real S3 API server on 127.0.0.1 (moto) delivers them to its
SQS queue; a real `wap watch` process consumes them, with a test event, a message that is no S3 event, a
URL-encoded key, a duplicated event and an unchanged re-upload among them; then SIGTERM stops it cleanly.
The source's schedule is once a year, so only events can have brought the files in.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support.cli_harness import WAP, Reader, checksum, env, wap, write_config
from support.s3_server import REGION, S3Env, start_s3_env
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Env]:
    e = start_s3_env()
    yield e
    e.server.stop()


def _wait(what: str, done: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def _event(bucket: str, key_encoded: str) -> str:
    """An S3 notification as S3 (and moto) sends it, for a key already URL-encoded."""
    obj = {"key": key_encoded, "size": 1}
    rec = {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": bucket}, "object": obj}}
    return json.dumps({"Records": [rec]})


def test_watch_consumes_s3_events_once_each_and_stops_on_sigterm(s3: S3Env, tmp_path: Path) -> None:
    landing, _ = s3.buckets()
    sqs, s3c = s3.client(service="sqs"), s3.client()
    queue = f"landed-{landing}"
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    rule = {"Key": {"FilterRules": [{"Name": "prefix", "Value": "trips/"}]}}
    s3c.put_bucket_notification_configuration(  # sends an s3:TestEvent to the queue first
        Bucket=landing,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"], "Filter": rule}]
        },
    )
    cfg = write_config(
        tmp_path,
        f'[s3]\nendpoint = "{s3.endpoint}"\nregion = "{REGION}"\n{s3.admin.toml()}\n\n'
        '[tables."k.trips"]\nchecks = [{ check = "unique", columns = ["trip_id"] }]\n\n'
        f'[sources.trips]\ntable = "k.trips"\nlocation = "s3://{landing}/trips/"\n'
        f'events = "sqs://{queue}"\nschedule = "0 0 1 1 *"\n\n[watch]\nworker = "events"\n',
        catalog="evcat",
    )
    log = tmp_path / "watch.log"
    with log.open("w") as err:
        proc = subprocess.Popen([WAP, "watch", "--config", str(cfg)], stderr=err, stdout=err, env=env())
    try:
        _wait("the worker to start", lambda: "watching trips" in log.read_text())
        bodies = {}
        for name, first in (("a b.parquet", 1), ("f2.parquet", 101)):
            buf = io.BytesIO()
            pq.write_table(generate_trips(30, start_id=first, seed=first), buf)
            bodies[name] = buf.getvalue()
            s3c.put_object(Bucket=landing, Key=f"trips/{name}", Body=bodies[name])
        s3c.put_object(Bucket=landing, Key="other/x.parquet", Body=bodies["f2.parquet"])  # not the source's
        sqs.send_message(QueueUrl=url, MessageBody="hello, not an S3 event")
        sqs.send_message(QueueUrl=url, MessageBody=_event(landing, "trips/a+b.parquet"))  # a duplicate

        def ledger() -> list[dict]:
            return wap("files", "trips", "--config", str(cfg), "--json").doc["files"]

        _wait("both files published", lambda: [r["state"] for r in ledger()] == ["published"] * 2)
        # The same bytes uploaded again: same ETag, same identity, nothing new.
        s3c.put_object(Bucket=landing, Key="trips/f2.parquet", Body=bodies["f2.parquet"])
        sqs.send_message(QueueUrl=url, MessageBody=_event(landing, "trips/f2.parquet"))

        def drained() -> bool:
            attrs = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
            a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=attrs)["Attributes"]
            return all(a[k] == "0" for k in attrs)

        _wait("the queue to be drained", drained)
        time.sleep(2)  # the events taken last are recorded before their messages are deleted; settle
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text
    assert "stopping" in text and "Traceback" not in text
    assert "no S3 event was dropped" in text
    assert s3.admin.secret_access_key not in text

    rows = ledger()
    assert sorted(r["uri"] for r in rows) == [f"s3://{landing}/trips/a b.parquet", f"s3://{landing}/trips/f2.parquet"]
    assert {r["state"] for r in rows} == {"published"}
    reader = Reader(tmp_path, "evcat")
    expected = [r for b in bodies.values() for r in pq.read_table(io.BytesIO(b)).to_pylist()]
    assert checksum(reader.rows("k.trips"), "trip_id") == checksum(expected, "trip_id")  # each row once
    assert reader.branches("k.trips") == []
    runs = wap("runs", "--config", str(cfg), "--json").doc["runs"]
    assert {r["status"] for r in runs} == {"published"}, runs

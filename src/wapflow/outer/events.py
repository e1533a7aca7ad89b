"""S3 ObjectCreated notifications read from SQS: which keys landed, so `wap watch` need not wait for a listing.

An event only says which key to look at: the file's identity (size, ETag) is read from S3 itself, so an
event for an object overwritten or deleted since is harmless, and a duplicated event (SQS delivers at least
once) meets the ledger's key and adds nothing. Test events (`s3:TestEvent`, sent when a notification is
configured), other event types and bodies that are not S3 events are dropped, saying so once. Keys arrive
URL-encoded (`+` for a space). Messages are deleted only after their files are in the ledger: a crash in
between redelivers them, which is one more duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from wapflow.errors import EnvironmentProblem
from wapflow.storage.s3 import S3Store


@dataclass(frozen=True)
class Landed:
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse_body(body: str) -> list[Landed] | None:
    """The created objects an SQS message body names; [] for a test event; None for what is no S3 event.
    Bodies delivered through SNS (an envelope with the event as its Message) are unwrapped."""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and doc.get("Type") == "Notification" and isinstance(doc.get("Message"), str):
            doc = json.loads(doc["Message"])
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("Event") == "s3:TestEvent":
        return []
    records = doc.get("Records")
    if not isinstance(records, list):
        return None
    out: list[Landed] = []
    for rec in records:
        try:
            if not str(rec.get("eventName", "")).startswith("ObjectCreated"):
                continue
            s3 = rec["s3"]
            out.append(Landed(s3["bucket"]["name"], unquote_plus(s3["object"]["key"])))
        except (KeyError, TypeError, AttributeError):
            continue
    return out


class SqsEvents:
    """One SQS queue (`sqs://NAME` on the [s3] endpoint, or its URL), with the [s3] credentials."""

    def __init__(self, store: S3Store, events: str, *, warn: Callable[[str], None]) -> None:
        self.events = events
        self.warn = warn
        self.client: Any = store.boto_client("sqs")
        self.queue_url = self._resolve(events)
        self._warned_foreign = False

    def _resolve(self, events: str) -> str:
        """The queue's URL, checked now: an unreachable or missing queue is an error before anything runs."""
        try:
            if events.startswith("sqs://"):
                url: str = self.client.get_queue_url(QueueName=events[len("sqs://") :].strip("/"))["QueueUrl"]
            else:
                url = events
            self.client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            return url
        except Exception as e:  # botocore's errors name the cause; ours says what to do
            detail = getattr(e, "response", {}).get("Error", {}).get("Code") or type(e).__name__
            raise EnvironmentProblem(
                f"cannot read events from {events}: {detail}",
                hint="check events = in [sources.*] (sqs://QUEUE-NAME on the [s3] endpoint, or the queue URL), "
                "that the queue exists and that the credentials may receive from it",
            ) from e

    def receive(self, wait_seconds: int = 0) -> tuple[list[Landed], list[str]]:
        """Up to 10 messages: the objects they name and their receipt handles (delete after recording)."""
        res = self.client.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_seconds)
        landed: list[Landed] = []
        handles: list[str] = []
        for msg in res.get("Messages", []):
            handles.append(msg["ReceiptHandle"])
            found = parse_body(msg.get("Body", ""))
            if found is None and not self._warned_foreign:
                self._warned_foreign = True
                self.warn(f"{self.events}: a message that is no S3 event was dropped (and any like it)")
            landed.extend(found or [])
        return landed, handles

    def delete(self, handles: list[str]) -> None:
        for i in range(0, len(handles), 10):
            entries = [{"Id": str(n), "ReceiptHandle": h} for n, h in enumerate(handles[i : i + 10])]
            self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)

"""The embedded stack: moto in this process, the template deployed into it, the dispatcher running."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import IO, Any

import boto3

from dropscan import heap
from dropscan.audit.decision_rules import export_text, parse_export
from dropscan.forked import Done, Forked, usable_cpus
from dropscan.local.deploy import REGION, DeployedStack, deploy
from dropscan.local.dispatcher import Dispatcher
from dropscan.local.moto_table import MotoBatchTable, moto_items
from dropscan.store.content import LOCAL_ENV, ContentStore
from dropscan.store.dump import (
    SCANS_FOLDER,
    export_db,
    export_rest,
    git_states,
    import_db,
    load_scans,
    save_scans,
)
from dropscan.store.scans import now
from dropscan.store.services import reset as reset_services
from dropscan.store.stack import Client, StackNames

_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


@dataclass(frozen=True)
class Notification:
    """One message on the notification topic, as an SQS subscriber receives it."""

    subject: str
    message: str
    attributes: dict[str, str]

    def to_eml(self) -> EmailMessage:
        mail = EmailMessage()
        mail["Subject"] = self.subject
        mail["From"] = "dropscan <dropscan@localhost>"
        mail["To"] = "compliance <compliance@localhost>"
        mail["Date"] = formatdate(localtime=True)
        for k, v in sorted(self.attributes.items()):
            mail[f"X-Dropscan-{k.replace('_', '-').title()}"] = v
        mail.set_content(self.message)
        return mail


@dataclass
class Mailbox:
    """An SQS queue subscribed to the topic: what an e-mail subscriber would get, kept for reading."""

    sqs: Any
    queue_url: str
    received: list[Notification] = field(default_factory=list)

    @classmethod
    def subscribe(cls, session: boto3.session.Session, topic_arn: str, name: str) -> Mailbox:
        sqs, sns = session.client("sqs"), session.client("sns")
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=arn)
        return cls(sqs, url)

    def fetch(self) -> list[Notification]:
        """New notifications since the last call."""
        new: list[Notification] = []
        while True:
            msgs = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get(
                "Messages", []
            )
            if not msgs:
                break
            for m in msgs:
                env = json.loads(m["Body"])
                attrs = {k: v["Value"] for k, v in env.get("MessageAttributes", {}).items()}
                new.append(Notification(env.get("Subject", ""), env["Message"], attrs))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        self.received.extend(new)
        return new

    def for_scan(self, scan_id: str) -> list[Notification]:
        self.fetch()
        return [n for n in self.received if n.attributes.get("scan_id") == scan_id]


@dataclass
class EmbeddedStack:
    session: boto3.session.Session
    stack: DeployedStack
    dispatcher: Dispatcher
    mailbox: Mailbox
    client: Client
    names: StackNames
    data_dir: Path | None = None
    _saving: Forked[None] | None = None

    def save_db_beside(self) -> None:
        """Save the upstream database now, in a forked child, while this process goes on.

        For a scan after its ingests: the database is final before the drop is uploaded, and writing it
        (a point-in-time export of 80,000 items, 4 s) then runs on the other core, not after the scan.
        """
        if self.data_dir is None or not self.client.changed:
            return
        self._join_save()
        self.client.changed = False  # changes after this fork are saved again at exit
        self._saving = Forked(_save_db, self.client, self.session.client("s3"), self.data_dir)

    def _join_save(self) -> None:
        saving, self._saving = self._saving, None
        if saving is not None:
            with saving:
                saving.result()

    def save_db(self) -> None:
        """At exit: wait for a save under way, and save again if the database changed since; save the
        decisions if any were recorded, and the scans finished since the start."""
        self._join_save()
        if self.data_dir is None:
            return
        if self.client.changed:
            _save_db(self.client, self.session.client("s3"), self.data_dir)
        if self.client.decided:
            _save_decisions(self.client, self.data_dir)
        save_scans(
            self.session.client("dynamodb"),
            self.session.client("s3"),
            self.names.scans_table,
            self.names.results_bucket,
            self.data_dir / SCANS_FOLDER,
        )


#: one process runs the functions one after another, so a redelivery can never overlap its first run;
#: short timeouts let a crashed invocation's messages come back in seconds rather than minutes;
#: triage uses every core of the machine; DynamoDB calls one at a time per process, as moto answers
#: under this process's GIL, and a lookup's reads split with a forked child that has a GIL of its own;
#: chunks as big as the template allows, as lookups run one at a time here and each forks once
#: (figures in docs/design.md, "Local stack")
LOCAL_PARAMETERS = {
    "QueueVisibilityTimeout": "30",
    "StageVisibilityTimeout": "10",
    "FunctionTimeout": "30",
    "TriageWorkers": "0",
    "DynamoDBConcurrency": "1",
    "DynamoDBReads": "forked",
    "ChunkSize": "5000",
    "ChunkKeys": "5000",
    # parts run one after another here, each reading the drop again: on one machine a review set past
    # TriageMaxFiles is read past it by tags, in minutes, as before the fan-out (docs/design.md)
    "TriageMaxParts": "1",
}

#: scheduled functions (the sweeper) run this often locally, whatever their rule's rate
SCHEDULE_EVERY_S = 30.0


DB_FILE = "upstream-db.jsonl.gz"
#: the upstream texts, revisions and hunks review evidence reads (``content/`` of the upstream bucket)
CONTENT_FOLDER = "content"


def _load_db(client: Client, s3: Any, data_dir: Path) -> None:
    dump = data_dir / DB_FILE
    if dump.is_file():
        with dump.open("rb") as f:  # the same merge as ``dropscan db import``
            import_db(client.db, s3, client.names.upstream_bucket, f)


DECISIONS_FILE = "decisions.json"


def _load_decisions(client: Client, data_dir: Path) -> None:
    path = data_dir / DECISIONS_FILE
    if path.is_file():
        client.decisions.put(parse_export(path.read_text()))


def _save_decisions(client: Client, data_dir: Path) -> None:
    """The decisions in their exchange format (``dropscan decisions export`` writes the same)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / (DECISIONS_FILE + ".tmp")
    tmp.write_text(export_text(client.decisions.all(), exported_at=now()))
    tmp.replace(data_dir / DECISIONS_FILE)


def _save_db(client: Client, s3: Any, data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / (DB_FILE + ".tmp")
    part = data_dir / (DB_FILE + ".rest.tmp")
    # the git states' and digests' lines (most of a dump) in a forked child, the digests read from its
    # copy of moto's table model, while this process writes the path lists: two members, one dump
    packages = client.db.packages()
    args = (
        git_states(s3, client.names.upstream_bucket, packages),  # copied, not parsed
        client.db.table,
        client.db.open_releases(packages),
        part,
    )
    rest: Forked[int] | Done[int]
    if multiprocessing.current_process().daemon or usable_cpus() < 2:  # in save_db_beside's child
        rest = Done(_save_rest(*args))
    else:
        rest = Forked(_save_rest, *args)
    with rest:
        with tmp.open("wb") as f:  # gzip's fastest level: local storage
            export_db(client.db, s3, client.names.upstream_bucket, f, level=1, releases_only=True)
        # the contents first: a database whose evidence data is not beside it yet is never left behind
        ContentStore(s3, client.names.upstream_bucket).save_to(data_dir / CONTENT_FOLDER)
        rest.result()
    with tmp.open("ab") as f, part.open("rb") as lines:
        shutil.copyfileobj(lines, f)
    part.unlink()
    tmp.replace(data_dir / DB_FILE)  # never leave a half-written database behind


def _save_rest(states: dict[str, bytes], table: str, tops: dict[str, str], path: Path) -> int:
    with path.open("wb") as f:
        return export_rest(states, moto_items(table), tops, f, level=1)


@contextmanager
def embedded(
    *,
    parameters: dict[str, str] | None = None,
    log_stream: IO[str] | None = None,
    data_dir: Path | None = None,
    upstream: bool = True,
) -> Iterator[EmbeddedStack]:
    """Start moto in-process, deploy template.yaml, and yield the running stack.

    With ``data_dir``, the upstream database (unless not ``upstream``: commands that never scan),
    the decisions and the finished scans are loaded from it and, when changed, saved back at exit.
    """
    from moto import mock_aws

    saved = dict(os.environ)
    for k, v in _FAKE_CREDENTIALS.items():
        os.environ[k] = v  # never reach a real account from the embedded stack
    os.environ.pop("AWS_ENDPOINT_URL", None)
    os.environ.pop("AWS_PROFILE", None)
    try:
        with heap.frozen_survivors(), mock_aws():
            session = boto3.session.Session(region_name=REGION)
            stack = deploy(session, parameters={**LOCAL_PARAMETERS, **(parameters or {})})
            dispatcher = Dispatcher(
                stack, session.client("sqs"), log_stream=log_stream, schedule_every=SCHEDULE_EVERY_S
            )
            names = StackNames.from_outputs(stack.outputs)
            mailbox = Mailbox.subscribe(session, names.topic_arn, f"{stack.name}-mailbox")
            # the CLI's batches go straight into moto's table model (local/moto_table.py)
            client = Client(
                session,
                names,
                pump=lambda done, t: dispatcher.run_until(done, timeout=t),
                db_concurrency=1,
                db_batch=MotoBatchTable,
            )
            s3 = session.client("s3")
            if data_dir is not None:
                if upstream:
                    _load_db(client, s3, data_dir)
                    os.environ[LOCAL_ENV] = str(data_dir / CONTENT_FOLDER)  # read in place, not loaded
                _load_decisions(client, data_dir)
                load_scans(
                    session.client("dynamodb"),
                    s3,
                    names.scans_table,
                    names.results_bucket,
                    data_dir / SCANS_FOLDER,
                )
            es = EmbeddedStack(session, stack, dispatcher, mailbox, client, names, data_dir)
            try:
                yield es
                es.save_db()
            finally:
                es._join_save()  # a failed scan still leaves the database its ingests saved
                dispatcher.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        reset_services()


def write_eml(notification: Notification, folder: Path, stem: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.eml"
    path.write_bytes(bytes(notification.to_eml()))
    return path

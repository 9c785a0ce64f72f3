"""``dropscan up``: the stack in a moto server on loopback, so that any S3 client's uploads are scanned."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import boto3

from dropscan.local.deploy import REGION, deploy
from dropscan.local.dispatcher import Delivery, Dispatcher
from dropscan.local.embedded import _FAKE_CREDENTIALS, Mailbox, write_eml
from dropscan.local.http_api import start as start_desk
from dropscan.local.scan_log import ScanLog
from dropscan.store.services import reset as reset_services
from dropscan.store.stack import Client, StackNames

#: what the AWS CLI and boto3 need to reach the server: moto takes any key, but a client needs one
CREDENTIALS = {k: _FAKE_CREDENTIALS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")} | {
    "AWS_DEFAULT_REGION": REGION
}


def export_line() -> str:
    """``export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1``"""
    return "export " + " ".join(f"{k}={v}" for k, v in CREDENTIALS.items())


def serve(*, host: str, port: int, eml_dir: Path, data_dir: Path, verbose: bool = False) -> int:
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    # the dispatcher polls each queue five times a second: werkzeug would log every one of those calls
    logging.getLogger("werkzeug").setLevel(logging.INFO if verbose else logging.ERROR)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    url = f"http://{host}:{port}"
    for k, v in _FAKE_CREDENTIALS.items():
        os.environ.setdefault(k, v)
    os.environ["AWS_ENDPOINT_URL"] = url  # boto3 and pynamodb in the handlers follow it
    try:
        session = boto3.session.Session(region_name=REGION)
        stack = deploy(session)
        names = StackNames.from_outputs(stack.outputs)
        logs = data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "functions.log").open("a") as log:
            dispatcher = Dispatcher(stack, session.client("sqs"), log_stream=log)
            mailbox = Mailbox.subscribe(session, names.topic_arn, f"{stack.name}-mailbox")
            dispatcher.drain(timeout=30)  # the buckets' s3:TestEvent messages, before the banner
            desk = start_desk(stack, url, host=host, port=int(os.environ.get("DROPSCAN_WEB_PORT", port + 1)))
            os.environ["DESK_URL"] = f"http://{host}:{desk.server_address[1]}/"  # the e-mail links to it
            reset_services()
            print(f"dropscan up: endpoint {url} (region {REGION}; any access key, but a client needs one)")
            print(f"  {export_line()}")
            print(f"  drops bucket     s3://{names.drops_bucket}/drops/<supplier>/<file>")
            print(f"  upstream bucket  s3://{names.upstream_bucket}/upstream/<package>/<version>/<file>")
            print(f"  results bucket   s3://{names.results_bucket}/results/")
            print(f"  notifications    {eml_dir}/ (and printed here)")
            print(f"  function logs    {logs / 'functions.log'}")
            print(f"  review desk      http://{host}:{desk.server_address[1]}/ (docs/web.md)")
            print(f"e.g. aws --endpoint-url {url} s3 cp drop.tar.gz s3://{names.drops_bucket}/drops/acme/")
            sys.stdout.flush()
            # a line per scan: its counts every few seconds while it runs, what it found as it ends
            scan_log = ScanLog(Client(session, names, endpoint_url=url), every=1.0 if verbose else 5.0)
            scan_log.start()
            seen = len(dispatcher.history)
            while True:
                if not dispatcher.poll_once():
                    time.sleep(0.2)
                for d in dispatcher.history[seen:]:
                    if verbose or d.failed:  # an invocation a line only when asked, or when it failed
                        scan_log.line(delivery_line(d))
                seen = len(dispatcher.history)
                for note in mailbox.fetch():
                    scan_id = note.attributes.get("scan_id", "notification")
                    path = write_eml(note, eml_dir, eml_stem(eml_dir, scan_id))
                    scan_log.finished(note.attributes.get("supplier", ""), scan_id, note=f"e-mail {path}")
                    if verbose:
                        print(f"\n=== {note.subject}\n{note.message}\n", flush=True)
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def delivery_line(d: Delivery) -> str:
    """``unpack     1 message in 2.3 s`` (and how many failed): one invocation (``--verbose``, or a
    failed one); the functions' own log is in logs/functions.log."""
    name = d.function.removesuffix("Function").lower()
    what = "run" if d.scheduled else f"{d.messages:,} message{'s' if d.messages != 1 else ''}"
    took = f"{d.seconds:.1f} s" if d.seconds >= 0.1 else "less than 0.1 s"
    failed = f", {d.failed:,} failed (see the function logs)" if d.failed else ""
    return f"{name:<10} {what} in {took}{failed}"


def eml_stem(eml_dir: Path, scan_id: str) -> str:
    """``<scan id>``, or ``<scan id>.<n>`` for its n-th notification (a manifest revised for a firmware
    image is notified again): one file per notification, none overwritten."""
    n = 1
    while (eml_dir / (f"{scan_id}.{n}.eml" if n > 1 else f"{scan_id}.eml")).exists():
        n += 1
    return f"{scan_id}.{n}" if n > 1 else scan_id

"""``dropscan up``: the stack in a moto server on loopback, so that any S3 client's uploads are scanned."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import boto3

from dropscan.local.dispatcher import Dispatcher
from dropscan.local.embedded import _FAKE_CREDENTIALS, Mailbox, write_eml
from dropscan.local.stack import REGION, deploy
from dropscan.local.web import start as start_desk
from dropscan.store.stack import StackNames


def serve(*, host: str, port: int, eml_dir: Path, data_dir: Path) -> int:
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

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
            desk = start_desk(stack, url, host=host, port=int(os.environ.get("DROPSCAN_WEB_PORT", port + 1)))
            print(f"dropscan up: endpoint {url} (region {REGION}, any access key)")
            print(f"  drops bucket     s3://{names.drops_bucket}/drops/<supplier>/<file>")
            print(f"  upstream bucket  s3://{names.upstream_bucket}/upstream/<package>/<version>/<file>")
            print(f"  results bucket   s3://{names.results_bucket}/results/")
            print(f"  notifications    {eml_dir}/ (and printed here)")
            print(f"  function logs    {logs / 'functions.log'}")
            print(f"  review desk      http://{host}:{desk.server_address[1]}/ (docs/web.md)")
            print(f"e.g. aws --endpoint-url {url} s3 cp drop.tar.gz s3://{names.drops_bucket}/drops/acme/")
            sys.stdout.flush()
            while True:
                if not dispatcher.poll_once():
                    time.sleep(0.2)
                for note in mailbox.fetch():
                    path = write_eml(note, eml_dir, note.attributes.get("scan_id", "notification"))
                    print(f"\n=== {note.subject}\n{note.message}\n(written to {path})")
                    sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()

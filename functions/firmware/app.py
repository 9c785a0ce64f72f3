"""firmware: an image uploaded beside a drop, or a scan notify held back for its images -> the drop's
manifest revised with the ``firmware`` section (the binaries of each image against the drop's sources)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.events import firmware_scan, s3_objects
from dropscan.stages.firmware import image_uploaded, revise
from dropscan.store.idempotency import CONFIG as idempotency
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    svc = current_services()
    scan = firmware_scan(record)
    revised = [revise(svc, *scan)] if scan else [image_uploaded(svc, b, k) for b, k in s3_objects(record)]
    for _ in filter(None, revised):
        metrics.add_metric(name="ManifestsRevised", unit="Count", value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    idempotency.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )

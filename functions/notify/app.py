"""notify: a new manifest in the results bucket -> the audit summary on the notification topic."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.events import s3_objects
from dropscan.stages.notify import notify_manifest
from dropscan.store.idempotency import CONFIG as idempotency
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    for bucket, key in s3_objects(record):
        if notify_manifest(current_services(), bucket, key):  # None: published before
            metrics.add_metric(name="SummariesPublished", unit="Count", value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    idempotency.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )

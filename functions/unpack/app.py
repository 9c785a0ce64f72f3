"""unpack: an upload to the drops bucket, or a part of one -> hashed files in chunks on the chunk queue."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.events import part_message, s3_objects
from dropscan.stages.unpack import unpack_part, unpack_upload
from dropscan.store.idempotency import CONFIG as idempotency
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    part = part_message(record)
    if part is not None:  # a nested archive fanned out of an upload
        if unpack_part(current_services(), part):
            metrics.add_metric(name="PartsUnpacked", unit="Count", value=1)
        return
    for bucket, key in s3_objects(record):
        if unpack_upload(current_services(), bucket, key):
            metrics.add_metric(name="DropsUnpacked", unit="Count", value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    idempotency.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )

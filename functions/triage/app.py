"""triage: a classified scan -> licences and red flags of its review set, the reports, the manifest
(or, for a review set past one invocation, a part of it, or the assembly of its parts)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.events import json_body
from dropscan.stages.triage import triage_message
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    if triage_message(current_services(), json_body(record), record.message_id):
        metrics.add_metric(name="ManifestsWritten", unit="Count", value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )

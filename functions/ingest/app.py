"""ingest: an upstream release uploaded to upstream/<package>/<version>/ -> digests and path list; a git
bundle uploaded to upstream/<package>/git/<name>.bundle -> its tags and history (part by part)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.events import git_resume, s3_objects
from dropscan.stages.ingest import ingest_release
from dropscan.stages.ingest_git import ingest_bundle
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    resume = git_resume(record)
    if resume is not None:  # a git bundle's ingest going on from its checkpoint
        ingest_bundle(current_services(), *resume)
        return
    for bucket, key in s3_objects(record):
        result = ingest_release(current_services(), bucket, key)
        metrics.add_metric(name="UpstreamFilesIngested", unit="Count", value=result.files)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )

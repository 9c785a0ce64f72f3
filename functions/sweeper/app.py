"""sweeper: every few minutes -> scans past the deadline and dead-lettered uploads end failed, notified."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.stages.sweep import sweep
from dropscan.store.services import current_services

logger = Logger()
metrics = Metrics()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    # the sweep runs as of its scheduled time, not of whenever the invocation started
    result = sweep(current_services(), at=datetime.fromisoformat(event.time))
    metrics.add_metric(name="ScansTimedOut", unit="Count", value=len(result.timed_out))
    metrics.add_metric(name="UploadsDeadLettered", unit="Count", value=len(result.dead_lettered))
    return result.as_dict()

"""web: the review desk's HTTP API and pages (API Gateway HTTP API, payload 2.0) -> dropscan.web."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from dropscan.web.routes import handle

logger = Logger()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context)

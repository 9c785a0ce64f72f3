"""Powertools idempotency for the record functions of unpack and notify, keyed on the object they read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from dropscan.store.services import Services

logger = Logger(service="dropscan", child=True)

T = TypeVar("T")

#: S3 delivers a duplicate event within minutes; a day leaves room for a redrive from a dead-letter queue
RECORD_TTL_S = 24 * 3600


def _replayed(response: Any, idempotent_data: DataRecord) -> None:
    """A completed record: the work was done before, so the caller sees None (``nothing done now``)."""
    logger.info("duplicate event skipped", extra={"idempotency_key": idempotent_data.idempotency_key})
    return None


#: The handlers register their Lambda context here: a record left IN_PROGRESS by an invocation that was
#: killed then expires with that invocation's timeout, before SQS redelivers the message.
CONFIG = IdempotencyConfig(
    expires_after_seconds=RECORD_TTL_S, raise_on_no_idempotency_key=True, response_hook=_replayed
)


def once(svc: Services, name: str, fn: Callable[..., T | None], /, **kwargs: Any) -> T | None:
    """``fn(**kwargs)`` unless it already ran to the end for the same ``identity`` keyword; None if it did.

    ``identity`` (a dict of strings) is hashed into the record's key, prefixed by ``name``; an exception
    deletes the record, so that a retry runs ``fn`` again.
    """
    run = idempotent_function(
        fn,
        data_keyword_argument="identity",
        persistence_store=svc.idempotency,
        config=CONFIG,
        key_prefix=name,
    )
    result: T | None = run(**kwargs)
    return result

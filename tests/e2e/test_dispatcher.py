"""The local dispatcher's drain: it never ends while a mapped queue still holds a message."""

from __future__ import annotations

from typing import Any

import pytest
from moto.core.utils import unix_time_millis
from moto.sqs import models as sqs_models

from dropscan.local.embedded import EmbeddedStack


def test_a_message_whose_visibility_runs_out_during_the_check_keeps_the_stack_busy(
    stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stack with nothing to deliver (S3's test events taken), and moto's clock in the test's hands
    assert stack.dispatcher.drain(timeout=30) and stack.dispatcher.idle()
    sqs = stack.session.client("sqs")
    queue = stack.stack.mappings[0].queue_url
    start = unix_time_millis()
    clock = {"now": start, "counts": 0, "expire_after": 0}
    monkeypatch.setattr(sqs_models, "unix_time_millis", lambda: clock["now"])
    count_visible = sqs_models.Queue.approximate_number_of_messages.fget  # type: ignore[attr-defined]

    def counted(queue: Any) -> int:
        visible: int = count_visible(queue)
        clock["counts"] += 1
        if clock["counts"] == clock["expire_after"]:
            clock["now"] += 60_000  # the visibility timeout runs out right after this count
        return visible

    monkeypatch.setattr(sqs_models.Queue, "approximate_number_of_messages", property(counted))
    # moto counts visible messages apart from those in flight, several times an attribute request:
    # let the timeout run out after each of those counts in turn (a drain in CI once ended there)
    for expire_after in range(1, 13):
        clock.update(now=start + expire_after * 100_000, counts=0, expire_after=0)  # past the last turn
        sqs.send_message(QueueUrl=queue, MessageBody="{}")
        (received,) = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=30)["Messages"]  # it fails
        clock.update(counts=0, expire_after=expire_after)
        # Then the stack is not idle: the message counts as in flight or as visible, never as neither
        assert not stack.dispatcher.idle(), f"idle when the timeout ran out after count {expire_after}"
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=received["ReceiptHandle"])

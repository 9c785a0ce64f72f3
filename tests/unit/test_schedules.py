"""Schedule expressions the local dispatcher plays."""

from __future__ import annotations

import pytest

from dropscan.local.deploy import schedule_period


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [("rate(5 minutes)", 300), ("rate(1 minute)", 60), ("rate(2 hours)", 7200), ("rate(1 day)", 86400)],
)
def test_rate_expressions(expression: str, seconds: float) -> None:
    assert schedule_period(expression) == seconds


def test_cron_expressions_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="only rate"):
        schedule_period("cron(0 12 * * ? *)")

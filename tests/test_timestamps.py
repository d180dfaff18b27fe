"""ISO 8601 times read the same on Python 3.10 (Gradescope's default image) as on 3.11+."""

from __future__ import annotations

import datetime

import pytest

from grader.timestamps import parse_timestamp

ONE_HOUR = datetime.timezone(datetime.timedelta(hours=1))


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-12-05T23:59:00Z", datetime.datetime(2026, 12, 5, 23, 59, tzinfo=datetime.timezone.utc)),
    ("2026-12-05T23:59:00+0100", datetime.datetime(2026, 12, 5, 23, 59, tzinfo=ONE_HOUR)),
    ("2026-12-05 23:59+0100", datetime.datetime(2026, 12, 5, 23, 59, tzinfo=ONE_HOUR)),
    ("2026-12-05T23:59:00+01:00", datetime.datetime(2026, 12, 5, 23, 59, tzinfo=ONE_HOUR)),
    ("2026-12-05T23:59:00.123456-0630",
     datetime.datetime(2026, 12, 5, 23, 59, 0, 123456, tzinfo=datetime.timezone(-datetime.timedelta(hours=6, minutes=30)))),
    ("2026-12-05T23:59:00", datetime.datetime(2026, 12, 5, 23, 59)),  # naive stays naive
    ("2026-12-05", datetime.datetime(2026, 12, 5)),
])
def test_parse_timestamp(text: str, expected: datetime.datetime) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected and parsed.utcoffset() == expected.utcoffset()
    assert (parsed.tzinfo is None) == (expected.tzinfo is None)


def test_z_is_utc_itself() -> None:
    assert parse_timestamp("2026-12-05T23:59:00Z").tzinfo is datetime.timezone.utc


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-05T23:59:00Z", "2026-12-05T23:59:00+2500"])
def test_parse_timestamp_raises_value_error_as_fromisoformat_does(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(text)

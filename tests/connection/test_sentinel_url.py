"""`redis+sentinel://` URLs (issue 15): parsed into sentinels, service, database and
passwords, mistakes named without the password, and masked wherever a URL is shown.
The failover itself, on real sentinels: tests/connection/test_sentinel.py (`-m sentinel`)."""

from __future__ import annotations

import pytest

from limpyd_blueque import ConfigurationError
from limpyd_blueque.connection.errors import mask_secrets
from limpyd_blueque.connection.sentinel import parse


def test_a_url_names_sentinels_service_database_and_passwords():
    parsed = parse("redis+sentinel://:s3cret@10.0.0.1:26379,[::1]:26380/queues/3"
                   "?sentinel_password=other&socket_timeout=2.5")
    assert parsed.sentinels == [("10.0.0.1", 26379), ("::1", 26380)]
    assert (parsed.service, parsed.db, parsed.password) == ("queues", 3, "s3cret")
    assert parsed.sentinel_options == {"password": "other"}
    assert parsed.socket_options == {"socket_timeout": 2.5}
    assert parsed.describe() == "redis+sentinel://10.0.0.1:26379,::1:26380/queues/3"
    assert parse("redis+sentinel://h:1/s").db == 0


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+sentinel://h:26379", "the sentinels and the service name are needed"),
    ("redis+sentinel:///queues", "the sentinels and the service name are needed"),
    ("redis+sentinel://h/queues", "a sentinel is host:port"),
    ("redis+sentinel://h:99999/queues", "a sentinel is host:port"),
    ("redis+sentinel://h:1/queues/zero", "is a number"),
    ("redis+sentinel://h:1/queues?socket_timeout=-1", "socket_timeout"),
    ("redis+sentinel://h:1/queues?colour=blue", "unknown option(s) of a sentinel URL: colour"),
])
def test_a_wrong_url_is_named(url, problem):
    with pytest.raises(ConfigurationError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse(url)


def test_passwords_of_a_sentinel_url_are_masked():
    url = "redis+sentinel://user:pw@h:1/queues?sentinel_password=spw"
    assert mask_secrets(url) == "redis+sentinel://user:***@h:1/queues?sentinel_password=***"

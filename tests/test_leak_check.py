"""The suite's check for leaked Kafka clients (tests/conftest.py) fails the test that
leaks one, naming it, and passes a test whose clients are closed."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.conftest import check_no_client_left, librdkafka_clients
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

#: a port nothing listens on: the client only tries to connect
NOWHERE = "127.0.0.1:9"


def test_a_client_left_alive_fails_the_test_that_made_it_and_a_closed_one_does_not():
    before = librdkafka_clients()
    leaked = Producer({"bootstrap.servers": NOWHERE})
    assert librdkafka_clients() == before + 1
    with pytest.raises(pytest.fail.Exception, match=r"tests/x\.py::leaky left 1 librdkafka client\(s\) alive"):
        check_no_client_left(before, "tests/x.py::leaky", timeout_s=0.5)
    del leaked  # confluent-kafka destroys the client with its last reference
    eventually(lambda: librdkafka_clients() == before, 10, "the destroyed client's threads to end")
    check_no_client_left(before, "tests/x.py::tidy", timeout_s=0.5)

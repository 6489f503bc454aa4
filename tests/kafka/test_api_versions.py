"""docs/kafka-clients.md's column of Kafka 4.4's versions is what the real Kafka answers
to ApiVersions: every API its broker listener serves, at the versions it serves."""

from __future__ import annotations

import pytest

from tests.api_table import DOC, rows, versions
from tests.kafka.differential import Peer
from tests.kafka.real_kafka import RealKafka

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
API_VERSIONS = 18


def test_the_table_of_apis_has_kafka_4_4s_versions(real_kafka: RealKafka) -> None:
    peer = Peer("kafka", real_kafka.bootstrap)
    try:
        answer = peer.request(API_VERSIONS, 3, {"client_software_name": "raw-test", "client_software_version": "1.0"})
    finally:
        peer.close()
    assert {row.key: row.kafka for row in rows(DOC.read_text())} == {
        api["api_key"]: versions(api["min_version"], api["max_version"]) for api in answer["api_keys"]}

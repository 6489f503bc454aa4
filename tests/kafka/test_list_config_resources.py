"""ListConfigResources (74, KIP-1142) on Apache Kafka 4.4 and on Exactly: the same
resources of each type both have (each broker's own topics aside: the real Kafka lives
for the whole session), the same refusal of a type it does not list, and the same v0
(ListClientMetricsResources: none). Broker loggers differ: Kafka lists its node, this
broker has none to configure."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kafka.differential import Peer, create_topics, plain, unique

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]

LIST_CONFIG_RESOURCES = 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def listed(peer: Peer, version: int, *types: int) -> dict[str, Any]:
    body = {"resource_types": list(types)} if version >= 1 else {}
    answer = plain(peer.request(LIST_CONFIG_RESOURCES, version, body))
    answer.pop("throttle_time", None)
    return answer


def test_list_config_resources_lists_what_kafka_lists(brokers: tuple[Peer, Peer]) -> None:
    topic = unique("config-resources")
    answers: dict[str, dict[str, Any]] = {}
    for peer in brokers:
        create_topics(peer, {topic: (1, {})})
        every = listed(peer, 1)
        answers[peer.name] = {
            "every": (every["error_code"], {(r["resource_name"], r["resource_type"]) for r in every["config_resources"]
                                            if r["resource_type"] != TOPIC or r["resource_name"] == topic}),
            "topics-named": {r["resource_type"] for r in listed(peer, 1, TOPIC)["config_resources"]},
            "has-topic": (topic, TOPIC) in {(r["resource_name"], r["resource_type"])
                                            for r in listed(peer, 1, TOPIC)["config_resources"]},
            "brokers": listed(peer, 1, BROKER),
            "metrics-and-groups": listed(peer, 1, CLIENT_METRICS, GROUP),
            "unknown-type": listed(peer, 1, TOPIC, 99),
            "v0": listed(peer, 0),
            "loggers": listed(peer, 1, BROKER_LOGGER),
        }
    kafka, exactly = answers["kafka"], answers["exactly"]
    assert kafka["has-topic"] and kafka["topics-named"] == {TOPIC}
    assert kafka["unknown-type"]["error_code"] != 0
    # broker loggers: Kafka's node; none here (no logger configs)
    assert kafka.pop("loggers")["config_resources"] == [{"resource_name": "1", "resource_type": BROKER_LOGGER}]
    assert exactly.pop("loggers") == {"error_code": 0, "config_resources": []}
    kafka["every"][1].discard(("1", BROKER_LOGGER))
    assert exactly == kafka

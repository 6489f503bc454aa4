"""AlterConfigs (33) and IncrementalAlterConfigs (44) on the Kafka port, through
confluent-kafka's AdminClient (librdkafka) and a raw connection for what it never
sends: a change is durable and obeyed at once, visible to DescribeConfigs and the HTTP
API alike; errors are per resource, as Kafka answers them."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from exactly.app.engine import read_models
from exactly.app.http import create_app
from exactly.app.kafka.api import ApiKey
from tests.kafka_support import KafkaBroker, outcomes, raw_connection

pytestmark = [pytest.mark.timeout(120),  # AlterConfigs is deprecated, and still what some tools send
              pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")]

TOPIC, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER
SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        for future in admin.create_topics([NewTopic("t", 1, 1), NewTopic("u", 1, 1)]).values():
            future.result(timeout=30)
        yield k


def admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def incremental(kafka: KafkaBroker, resources: list[ConfigResource], validate_only: bool = False) -> dict:
    client = admin(kafka)
    return outcomes(client.incremental_alter_configs(resources, validate_only=validate_only, request_timeout=30))


def topic(name: str, **ops: tuple[AlterConfigOpType, str | None]) -> ConfigResource:
    """A topic resource with incremental operations by config name (``retention_ms=(SET, "1")``)."""
    return ConfigResource(TOPIC, name, incremental_configs=[
        ConfigEntry(key.replace("_", "."), value, incremental_operation=op) for key, (op, value) in ops.items()])


def described(kafka: KafkaBroker, name: str) -> dict[str, ConfigEntry]:
    client = admin(kafka)
    (future,) = client.describe_configs([ConfigResource(TOPIC, name)], request_timeout=30).values()
    return future.result(timeout=60)


def http_configs(kafka: KafkaBroker, name: str) -> dict[str, dict]:
    client = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    answer = client.get(f"/v3/clusters/{kafka.broker.cluster_id}/topics/{name}/configs")
    assert answer.status_code == 200
    return {c["name"]: c for c in answer.json["data"]}


def test_a_set_is_durable_and_seen_by_describe_configs_and_http(kafka: KafkaBroker) -> None:
    assert incremental(kafka, [topic("t", retention_ms=(SET, "3600000"))]) == {"t": None}
    entry = described(kafka, "t")["retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                                                               False)
    assert http_configs(kafka, "t")["retention.ms"]["value"] == "3600000"
    assert described(kafka, "u")["retention.ms"].value == "604800000"  # the other topic keeps the default
    assert incremental(kafka, [topic("t", retention_ms=(DELETE, None))]) == {"t": None}
    assert described(kafka, "t")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_max_message_bytes_refuses_a_larger_batch_at_once(kafka: KafkaBroker) -> None:
    def send(value: bytes) -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "retries": 0})
        producer.produce("t", value, on_delivery=lambda error, _: errors.append(error))
        assert producer.flush(30) == 0
        return errors[0]

    assert send(b"x" * 5000) is None
    assert incremental(kafka, [topic("t", max_message_bytes=(SET, "1000"))]) == {"t": None}
    refused = send(b"x" * 5000)
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert send(b"x" * 100) is None


def test_append_and_subtract_change_a_list_config_as_kafka_does(kafka: KafkaBroker) -> None:
    assert incremental(kafka, [topic("t", cleanup_policy=(APPEND, "compact"))]) == {"t": None}
    assert described(kafka, "t")["cleanup.policy"].value == "delete,compact"
    assert incremental(kafka, [topic("t", cleanup_policy=(APPEND, "compact,delete"))]) == {"t": None}
    assert described(kafka, "t")["cleanup.policy"].value == "delete,compact"  # already there: not twice
    assert incremental(kafka, [topic("t", cleanup_policy=(SUBTRACT, "delete"))]) == {"t": None}
    assert described(kafka, "t")["cleanup.policy"].value == "compact"
    refused = incremental(kafka, [topic("t", retention_ms=(APPEND, "5"))])["t"]
    assert refused.code() == KafkaError.INVALID_CONFIG and "not LIST" in refused.str()
    emptied = incremental(kafka, [topic("t", cleanup_policy=(SUBTRACT, "compact"))])["t"]
    assert emptied.code() == KafkaError.INVALID_CONFIG
    assert described(kafka, "t")["cleanup.policy"].value == "compact"


def test_errors_are_per_resource_and_change_nothing(kafka: KafkaBroker) -> None:
    answer = incremental(kafka, [topic("t", retention_ms=(SET, "1000"), segment_bytes=(SET, "not a number")),
                                 topic("u", retention_ms=(SET, "2000")),
                                 topic("missing", retention_ms=(SET, "1000"))])
    assert answer["t"].code() == KafkaError.INVALID_CONFIG
    assert answer["u"] is None
    assert answer["missing"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert described(kafka, "t")["retention.ms"].value == "604800000"  # all of a resource, or none
    assert described(kafka, "u")["retention.ms"].value == "2000"
    unknown = incremental(kafka, [topic("t", no_such_config=(SET, "1"))])["t"]
    assert unknown.code() == KafkaError.INVALID_CONFIG


def test_validate_only_checks_and_changes_nothing(kafka: KafkaBroker) -> None:
    assert incremental(kafka, [topic("t", retention_ms=(SET, "1000"))], validate_only=True) == {"t": None}
    assert described(kafka, "t")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    bad = incremental(kafka, [topic("t", retention_ms=(SET, "soon"))], validate_only=True)["t"]
    assert bad.code() == KafkaError.INVALID_CONFIG
    client = admin(kafka)
    legacy = client.alter_configs([ConfigResource(TOPIC, "t", set_config={"retention.ms": "1000"})],
                                  validate_only=True, request_timeout=30)
    assert outcomes(legacy) == {"t": None}
    assert described(kafka, "t")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_configs_replaces_a_topics_overrides_as_a_whole(kafka: KafkaBroker) -> None:
    assert incremental(kafka, [topic("t", retention_ms=(SET, "1000"))]) == {"t": None}
    client = admin(kafka)
    futures = client.alter_configs([ConfigResource(TOPIC, "t", set_config={"segment.ms": "60000"})],
                                   request_timeout=30)
    assert outcomes(futures) == {"t": None}
    configs = described(kafka, "t")
    assert configs["segment.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # not given: reset
    assert http_configs(kafka, "t")["segment.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"


def test_this_brokers_settings_are_read_only(kafka: KafkaBroker) -> None:
    node = str(kafka.engine.topics.node_id)
    refused = incremental(kafka, [ConfigResource(BROKER, node, incremental_configs=[
        ConfigEntry("log.retention.ms", "1000", incremental_operation=SET)])])[node]
    assert refused.code() == KafkaError.INVALID_REQUEST and "dynamically" in refused.str()
    client = admin(kafka)
    legacy = client.alter_configs([ConfigResource(BROKER, node, set_config={"num.partitions": "3"})],
                                  request_timeout=30)
    assert outcomes(legacy)[node].code() == KafkaError.INVALID_REQUEST
    (future,) = client.describe_configs([ConfigResource(BROKER, node)], request_timeout=30).values()
    entry = future.result(timeout=60)["num.partitions"]
    assert (entry.value, entry.is_read_only) == ("1", True)


def test_what_librdkafka_never_sends(kafka: KafkaBroker) -> None:
    """Another broker's id, a resource named twice, a key twice, an unknown operation,
    a null value: INVALID_REQUEST for that resource only."""
    def resource(kind: int, name: str, *configs: tuple[str, int, str | None]) -> dict:
        return {"resource_type": kind, "resource_name": name,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs]}

    with closing(raw_connection(kafka.port)) as connection:
        answer = connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            resource(4, "7"),
            resource(2, "t", ("retention.ms", 0, "1"), ("retention.ms", 1, None)),
            resource(2, "u", ("retention.ms", 9, "1")),
            resource(2, "u", ("retention.ms", 0, "1")),
            resource(4, ""),
        ]})
        codes = [(r.resource_name, r.error_code) for r in answer.responses]
        assert codes == [("7", 42), ("t", 42), ("u", 42), ("u", 42), ("", 0)]
        answer = connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"validate_only": False, "resources": [
            resource(2, "t", ("retention.ms", 0, None)), resource(2, "u", ("retention.ms", 4, "1")),
            resource(8, "t")]})
        assert [r.error_code for r in answer.responses] == [42, 42, 42]
        answer = connection.request(ApiKey.ALTER_CONFIGS, 0, {"validate_only": False, "resources": [
            {"resource_type": 2, "resource_name": "t", "configs": [{"name": "retention.ms", "value": None}]},
            {"resource_type": 2, "resource_name": "u", "configs": [{"name": "retention.ms", "value": "5"}]}]})
        assert [r.error_code for r in answer.responses] == [42, 0]
    assert described(kafka, "u")["retention.ms"].value == "5"


POLICIES = st.lists(st.tuples(st.sampled_from([APPEND, SUBTRACT]),
                              st.lists(st.sampled_from(["delete", "compact"]), min_size=1, max_size=2)), max_size=6)


def test_append_and_subtract_keep_a_list_without_duplicates(tmp_path: Path) -> None:
    """Against a model: APPEND adds the items not there yet, in order; SUBTRACT removes
    them; a list left empty is INVALID_CONFIG and changes nothing."""
    with KafkaBroker(tmp_path / "data") as kafka, closing(raw_connection(kafka.port)) as connection:
        kafka.engine.call(kafka.engine.topics.create_topic, "t", 1)

        def alter(op: AlterConfigOpType, value: str | None) -> int:
            answer = connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
                {"resource_type": 2, "resource_name": "t",
                 "configs": [{"name": "cleanup.policy", "config_operation": op.value, "value": value}]}]})
            return answer.responses[0].error_code

        @settings(max_examples=40, deadline=None)
        @given(POLICIES)
        def run(steps: list[tuple[AlterConfigOpType, list[str]]]) -> None:
            assert alter(DELETE, None) == 0
            model = ["delete"]
            for op, items in steps:
                wanted = model + [i for i in items if i not in model] if op is APPEND else \
                    [i for i in model if i not in items]
                code = alter(op, ",".join(items))
                if wanted:
                    assert code == 0
                    model = list(dict.fromkeys(wanted))
                else:
                    assert code == 40  # INVALID_CONFIG
            configs = kafka.engine.call(read_models.topic_configs, kafka.engine, "t")
            assert next(c["value"] for c in configs if c["name"] == "cleanup.policy") == ",".join(model)

        run()


def test_concurrent_changes_are_computed_one_after_the_other(kafka: KafkaBroker) -> None:
    """SUBTRACT reads the current value and writes a new one. Two at once, on two
    connections, from delete,compact: one of compact, one of delete -- the second,
    computed after the first is applied, would leave the list empty (INVALID_CONFIG);
    computed from the same old value, both would pass and one change be lost."""
    def subtract(value: str) -> dict:
        return {"validate_only": False, "resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "cleanup.policy", "config_operation": SUBTRACT.value, "value": value}]}]}

    with closing(raw_connection(kafka.port)) as one, closing(raw_connection(kafka.port)) as other:
        for _ in range(5):
            assert incremental(kafka, [topic("t", cleanup_policy=(SET, "delete,compact"))]) == {"t": None}
            one.send(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, subtract("compact"))
            other.send(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, subtract("delete"))
            codes = sorted(connection.receive(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)[1].responses[0].error_code
                           for connection in (one, other))
            assert codes == [0, 40]  # NONE, INVALID_CONFIG
            assert described(kafka, "t")["cleanup.policy"].value in ("delete", "compact")

"""Broker configuration: Kafka's names, one declaration per setting, and the README's
table of them kept in step with the code."""

from __future__ import annotations

from dataclasses import fields

import pytest

from exactly.app.config import BrokerConfig
from exactly.coordinator.group_coordinator import GroupConfig
from exactly.coordinator.transaction_coordinator import CoordinatorConfig
from exactly.storage.errors import InvalidConfigError
from tests.docs import all_text

DOCS = all_text()
BROKER_SETTINGS = [f.name for f in fields(BrokerConfig) if f.name != "log"]


@pytest.mark.parametrize("name", BROKER_SETTINGS)
def test_every_broker_setting_is_documented(name: str) -> None:
    assert f"`{name.replace('_', '.')}`" in DOCS


@pytest.mark.parametrize("part", [CoordinatorConfig, GroupConfig])
def test_the_coordinators_settings_are_the_brokers_with_the_same_defaults(part: type) -> None:
    config = BrokerConfig()
    assert isinstance(config, part)
    for f in fields(part):
        assert getattr(config, f.name) == getattr(part(), f.name)


def test_each_name_is_accepted_dotted_or_with_underscores_and_reaches_its_coordinator() -> None:
    config = BrokerConfig.from_kafka({"offsets.topic.num.partitions": "3", "transaction_max_timeout_ms": 5,
                                      "exactly.jobs.enable": "false", "segment.bytes": 1024})
    assert (config.offsets_topic_num_partitions, config.transaction_max_timeout_ms) == (3, 5)
    assert config.exactly_jobs_enable is False and config.log.segment_bytes == 1024


@pytest.mark.parametrize("values, message", [
    ({"log.segment.bytez": 1}, "unknown config"),
    ({"exactly.jobs.enable": "maybe"}, "true or false"),
    ({"exactly.mirror.interval.ms": 0}, "exactly.mirror.interval.ms must be >= 1"),
    ({"log.cleaner.backoff.ms": -5}, "log.cleaner.backoff.ms must be >= 1"),
    ({"transaction.max.timeout.ms": 0}, "transaction.max.timeout.ms must be >= 1"),
])
def test_bad_values_are_invalid_config(values: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_kafka(values)

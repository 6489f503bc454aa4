"""Configs as REST Proxy v3 resources: ``.../topics/<topic>/configs``,
``.../brokers/<id>/configs`` (this broker's settings and the topic defaults under their
broker-level names, read-only: they change with a restart) and ``.../broker-configs``
(the cluster-wide dynamic ones: none, as no broker config is dynamic here).

``GET .../configs`` lists every config of the topic with its effective value and
where it comes from (``exactly.app.engine.read_models.topic_configs``: set on the topic, a
broker default given at start-up, or Kafka's default); ``GET .../configs/<name>``
is one of them. Changes, as the Confluent proxy takes them:

* ``PUT .../configs/<name>`` with ``{"value": "..."}`` sets one override;
* ``DELETE .../configs/<name>`` resets it to the default;
* ``POST .../configs:alter`` with ``{"data": [{"name", "value", "operation": "SET" |
  "DELETE"}], "validate_only": false}`` changes several at once, all or nothing.

All answer 204 once ``topics.json`` holds the change (``Topics.alter_topic_config``);
a bad value is INVALID_CONFIG (400 / 40002) and changes nothing; ``validate_only``
checks and changes nothing.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, jsonify, request

from exactly.app.config import static_config_change
from exactly.app.engine import read_models
from exactly.app.http import access, current_engine
from exactly.app.http.access import TOPIC, Needs, kafka, listed
from exactly.app.http.api import models
from exactly.app.http.api.resources import check_broker, cluster_id, crn, listing, resource
from exactly.app.http.api.route import BROKER_PATH, CHANGES, CLUSTER_PATH, ON_TOPIC, TOPIC_PATH, Route, declare
from exactly.app.http.api.validation import body
from exactly.app.kafka.wire import ApiKey
from exactly.storage.errors import InvalidRequestError

bp = Blueprint("configs", __name__)

CONFIGS = TOPIC_PATH + "/configs"
BROKER_CONFIGS = BROKER_PATH + "/configs"
TAG = "Configs"
DESCRIBE_TOPIC_CONFIGS = kafka(ApiKey.DESCRIBE_CONFIGS, ON_TOPIC)
ALTER_TOPIC_CONFIGS = kafka(ApiKey.INCREMENTAL_ALTER_CONFIGS, ON_TOPIC)
#: a broker's configs are the cluster's resource, as Kafka authorizes them
DESCRIBE_BROKER_CONFIGS = kafka(ApiKey.DESCRIBE_CONFIGS)
ALTER_BROKER_CONFIGS = kafka(ApiKey.INCREMENTAL_ALTER_CONFIGS)
STATIC = ("Refused (400 INVALID_REQUEST), as Kafka refuses a read-only config: this broker's configs are set at "
          "start-up and change with a restart.")


def config_resource(topic: str, config: dict[str, Any]) -> dict[str, Any]:
    """REST v3's KafkaTopicConfig of one ``read_models.topic_configs`` row, its
    ``synonyms`` Kafka's (where the value comes from, most significant first)."""
    name = config["name"]
    return resource("KafkaTopicConfig", ("topics", topic, "configs", name),
                    crn(topic=topic, config=name), cluster_id=cluster_id(), topic_name=topic, **config)


def _configs(topic: str) -> list[dict[str, Any]]:
    engine = current_engine()
    return engine.call(read_models.topic_configs, engine, topic)


@declare(bp, Route("get", CONFIGS, "List topic configs", TAG, 200, models.listing(models.TopicConfig),
                   needs=DESCRIBE_TOPIC_CONFIGS))
def list_configs(topic_name: str):
    return jsonify(listing("KafkaTopicConfigList", ("topics", topic_name, "configs"),
                           [config_resource(topic_name, c) for c in _configs(topic_name)]))


@declare(bp, Route("get", CLUSTER_PATH + "/topics/-/configs", "List all topic configs", TAG, 200,
                   models.listing(models.TopicConfig), needs=kafka(ApiKey.DESCRIBE_CONFIGS, listed(TOPIC))))
def list_all_topic_configs():
    """The proxy's ``-`` wildcard: every topic's configs in one list."""
    engine = current_engine()
    found = [(t["topic_name"], configs) for t, configs in engine.call(read_models.topics_with_configs, engine)]
    shown = access.visible(TOPIC, (topic for topic, _ in found))
    return jsonify(listing("KafkaTopicConfigList", ("topics", "-", "configs"),
                           [config_resource(topic, c) for topic, configs in found if topic in shown
                            for c in configs]))


@declare(bp, Route("get", CONFIGS + "/{name}", "Get topic config", TAG, 200, models.TopicConfig,
                   needs=DESCRIBE_TOPIC_CONFIGS))
def get_config(topic_name: str, name: str):
    found = next((c for c in _configs(topic_name) if c["name"] == name), None)
    if found is None:
        abort(404, f"topic {topic_name!r} has no config {name!r}")
    return jsonify(config_resource(topic_name, found))


def _alter(topic: str, changes: dict[str, str | None], validate_only: bool = False):
    engine = current_engine()
    engine.call(engine.topics.alter_topic_config, topic, changes, validate_only)
    return "", 204


@declare(bp, Route("put", CONFIGS + "/{name}", "Update topic config", TAG, 204, None, CHANGES,
                   body=models.UpdateConfig, needs=ALTER_TOPIC_CONFIGS))
def update_config(topic_name: str, name: str):
    return _alter(topic_name, {name: body(models.UpdateConfig).value})


@declare(bp, Route("delete", CONFIGS + "/{name}", "Reset topic config", TAG, 204, None, CHANGES,
                   needs=ALTER_TOPIC_CONFIGS))
def reset_config(topic_name: str, name: str):
    return _alter(topic_name, {name: None})


@declare(bp, Route("post", CONFIGS + ":alter", "Batch alter topic configs", TAG, 204, None, CHANGES,
                   body=models.AlterConfigs, needs=ALTER_TOPIC_CONFIGS,
                   description="SET or DELETE several configs at once, all or nothing; validate_only checks and "
                               "changes nothing."))
def alter_configs(topic_name: str):
    request = body(models.AlterConfigs)
    changes: dict[str, str | None] = {}
    for i, item in enumerate(request.data):
        if item.name in changes:
            raise InvalidRequestError(f"data[{i}].name: {item.name} appears more than once")
        if item.operation == "DELETE":
            changes[item.name] = None
        elif item.value is None:
            raise InvalidRequestError(f"data[{i}].value is required to SET {item.name}")
        else:
            changes[item.name] = item.value
    return _alter(topic_name, changes, bool(request.validate_only))


# -- this broker's settings -------------------------------------------------------------


def _broker_configs(broker_id: int) -> list[dict[str, Any]]:
    check_broker(broker_id)
    engine = current_engine()
    return engine.call(read_models.broker_configs, engine)


def broker_config_resource(broker_id: int, config: dict[str, Any]) -> dict[str, Any]:
    name = config["name"]
    return resource("KafkaBrokerConfig", ("brokers", broker_id, "configs", name),
                    crn(broker=broker_id, config=name), cluster_id=cluster_id(), broker_id=broker_id, **config)


def _refuse_change(name: str | None = None):
    """A change to broker configs (one ``name``, or a batch alter's body), refused as
    Kafka refuses a read-only config (``exactly.app.config.static_config_change``); the body is
    read first, so a malformed one is named as such."""
    if name is None:
        raise static_config_change(item.name for item in body(models.AlterConfigs).data)
    if request.method == "PUT":
        body(models.UpdateConfig)
    raise static_config_change([name])


def _refused_changes(path: str, what: str, needs: Needs) -> tuple[Route, ...]:
    """The proxy's PUT, DELETE and batch alter of configs this broker holds static."""
    return (Route("put", path + "/{name}", f"Update {what} config", TAG, 204, None, CHANGES, body=models.UpdateConfig,
                  description=STATIC, needs=needs),
            Route("delete", path + "/{name}", f"Reset {what} config", TAG, 204, None, CHANGES, description=STATIC,
                  needs=needs),
            Route("post", path + ":alter", f"Batch alter {what} configs", TAG, 204, None, CHANGES,
                  body=models.AlterConfigs, description=STATIC, needs=needs))


@declare(bp, *_refused_changes(BROKER_CONFIGS, "broker", ALTER_BROKER_CONFIGS))
def change_broker_configs(broker_id: int, name: str | None = None):
    check_broker(broker_id)
    _refuse_change(name)


# -- cluster-wide broker configs --------------------------------------------------------
# Kafka's dynamic cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG): this broker's
# configs are all static, so there are none to list or read, and setting one is
# refused as Kafka refuses a read-only config.

CLUSTER_CONFIGS = CLUSTER_PATH + "/broker-configs"


@declare(bp, Route("get", CLUSTER_CONFIGS, "List cluster configs", TAG, 200, models.listing(models.ClusterConfig),
                   description="The dynamic cluster-wide broker configs: none (this broker's configs are static).",
                   needs=DESCRIBE_BROKER_CONFIGS))
def list_cluster_configs():
    return jsonify(listing("KafkaClusterConfigList", ("broker-configs",), []))


@declare(bp, Route("get", CLUSTER_CONFIGS + "/{name}", "Get cluster config", TAG, 200, models.ClusterConfig,
                   description="404: no config is dynamic here (GET .../brokers/{broker_id}/configs/{name} has the "
                               "value).", needs=DESCRIBE_BROKER_CONFIGS))
def get_cluster_config(name: str):
    abort(404, f"no dynamic cluster-wide broker config {name!r}: this broker's configs are static "
               f"(GET .../brokers/{current_engine().topics.node_id}/configs/{name} shows its value)")


@declare(bp, *_refused_changes(CLUSTER_CONFIGS, "cluster", ALTER_BROKER_CONFIGS))
def change_cluster_configs(name: str | None = None):
    _refuse_change(name)


@declare(bp, Route("get", CLUSTER_PATH + "/brokers/-/configs", "List all broker configs", TAG, 200,
                   models.listing(models.BrokerConfig), needs=DESCRIBE_BROKER_CONFIGS))
def list_all_broker_configs():
    """The proxy's ``-`` wildcard: every broker's configs -- this one's."""
    node = current_engine().topics.node_id
    return jsonify(listing("KafkaBrokerConfigList", ("brokers", "-", "configs"),
                           [broker_config_resource(node, c) for c in _broker_configs(node)]))


@declare(bp, Route("get", BROKER_CONFIGS, "List broker configs", TAG, 200, models.listing(models.BrokerConfig),
                   description="This broker's settings; read-only (set at start-up).", needs=DESCRIBE_BROKER_CONFIGS))
def list_broker_configs(broker_id: int):
    return jsonify(listing("KafkaBrokerConfigList", ("brokers", broker_id, "configs"),
                           [broker_config_resource(broker_id, c) for c in _broker_configs(broker_id)]))


@declare(bp, Route("get", BROKER_CONFIGS + "/{name}", "Get broker config", TAG, 200, models.BrokerConfig,
                   needs=DESCRIBE_BROKER_CONFIGS))
def get_broker_config(broker_id: int, name: str):
    found = next((c for c in _broker_configs(broker_id) if c["name"] == name), None)
    if found is None:
        abort(404, f"broker {broker_id} has no config {name!r}")
    return jsonify(broker_config_resource(broker_id, found))

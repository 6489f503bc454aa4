"""The broker's internal topics, declared once (Kafka's ``Topic.INTERNAL_TOPICS``): the
coordinators own their names (``transaction_log.TOPIC``, ``offsets_log.TOPIC``,
``cluster_metadata.TOPIC``); the engine refuses client writes and deletes to them, the admin
views mark them, and a Spark subscription pattern never matches them (Kafka's
``exclude.internal.topics``)."""

from exactly.coordinator import cluster_metadata, offsets_log, transaction_log

INTERNAL_TOPICS: tuple[str, ...] = (transaction_log.TOPIC, offsets_log.TOPIC, cluster_metadata.TOPIC)

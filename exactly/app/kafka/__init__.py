"""The Kafka wire protocol: Kafka's own clients (librdkafka / confluent-kafka, kcat,
kafka-python, aiokafka) against this broker, unchanged.

Layout:

* ``server.py`` -- the listener on the engine's event loop: connections, framing,
  back-pressure, responses in request order, bad input;
* ``codec.py`` -- requests and responses through ``kio`` (generated from Kafka's
  JSON message definitions); record batches pass through as bytes;
* ``api.py`` -- the registry: each handler declares the versions it serves, and
  ApiVersions is built from those declarations;
* one module per API family: ``metadata`` (ApiVersions, Metadata, FindCoordinator,
  DescribeCluster), ``produce``, ``fetch``, ``offsets`` (ListOffsets,
  OffsetForLeaderEpoch, OffsetCommit, OffsetFetch), ``groups``, ``transactions``
  (and the operator APIs), ``admin`` (CreateTopics, DeleteTopics, DescribeConfigs,
  AlterConfigs, IncrementalAlterConfigs, CreatePartitions, DeleteRecords, DescribeLogDirs),
  ``acls`` (CreateAcls, DescribeAcls, DeleteAcls), ``sasl`` (SaslHandshake,
  SaslAuthenticate, DescribeUserScramCredentials, AlterUserScramCredentials).

Handlers call the engine and the coordinators directly (they run on the engine's
loop); ``exactly/storage/`` and ``exactly/coordinator/`` know nothing of the wire.

Start it on a bound socket with :func:`attach`; ``close()`` the returned listener
before the engine.
"""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING

from exactly.app.kafka import acls, admin, fetch, groups, metadata, offsets, produce, sasl, transactions  # noqa: F401 (they register)
from exactly.app.kafka.api import APIS
from exactly.app.kafka.server import KafkaListener
from exactly.app.listeners import ListenerSpec

if TYPE_CHECKING:
    from exactly.app.engine import Engine


def attach(engine: "Engine", sock: socket.socket, spec: ListenerSpec | None = None,
           ssl_context: ssl.SSLContext | None = None) -> KafkaListener:
    """Serve the Kafka protocol on ``sock`` (bound and listening) from ``engine``'s loop,
    as the listener ``spec`` (None: PLAINTEXT), with TLS from ``ssl_context`` when its
    protocol needs it."""
    listener = KafkaListener(engine, sock, engine.config, spec, ssl_context)
    engine.call(listener.start)
    return listener


__all__ = ["APIS", "KafkaListener", "attach"]

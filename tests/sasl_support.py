"""Test support for SASL and TLS: a broker serving several Kafka listeners at once (as
``exactly serve`` does with ``listeners``), its users, and each client's settings."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any

from exactly.app import Broker
from exactly.app.kafka import KafkaListener, attach
from exactly.app.listeners import bind
from exactly.app.security.scram import ScramMechanism, new_credential
from exactly.app.security.tls import generate_certificate, server_context
from tests.kafka_support import CONFIG

LISTENERS = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
SCRAM = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)


class ClientSettings:
    """A broker's users and each client's settings for its listeners: ``engine``,
    ``port(name)`` and ``ca`` (the generated CA's path) come from the broker this is
    mixed into."""

    ca: str
    engine: Any

    def port(self, name: str) -> int:
        raise NotImplementedError

    def add_user(self, user: str, password: str, mechanisms: tuple[ScramMechanism, ...] = SCRAM) -> None:
        self.engine.call(self.engine.access.alter_scram_credentials, [],
                         [new_credential(user, m, password) for m in mechanisms])

    def confluent(self, protocol: str, mechanism: str = "PLAIN", user: str = "alice",
                  password: str = "alice-secret", **extra: Any) -> dict[str, Any]:
        """confluent-kafka / librdkafka settings for the listener of ``protocol``."""
        config = {"bootstrap.servers": f"127.0.0.1:{self.port(protocol)}", "security.protocol": protocol}
        if protocol.startswith("SASL"):
            config |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        if protocol.endswith("SSL"):
            config["ssl.ca.location"] = self.ca
        return config | extra

    def python_client(self, protocol: str, mechanism: str, user: str = "alice",
                      password: str = "alice-secret") -> dict[str, Any]:
        """kafka-python / aiokafka settings for the listener of ``protocol``."""
        config: dict[str, Any] = {"bootstrap_servers": f"127.0.0.1:{self.port(protocol)}",
                                  "security_protocol": protocol, "sasl_mechanism": mechanism,
                                  "sasl_plain_username": user, "sasl_plain_password": password}
        if protocol.endswith("SSL"):
            config["ssl_context"] = ssl.create_default_context(cafile=self.ca)
        return config


class ListenersBroker(ClientSettings):
    """A broker on ``data_dir`` with a listener per entry of ``listeners`` (free ports)."""

    def __init__(self, data_dir: Path, listeners: str = LISTENERS, **config: Any) -> None:
        self.broker = Broker(data_dir, **{**CONFIG, "listeners": listeners, "exactly.ssl.generate": True, **config})
        self.engine = self.broker.engine
        tls = server_context(self.broker.config, data_dir)
        self.ca = str(generate_certificate(data_dir).ca)
        self._sockets: list[socket.socket] = []
        self.listeners: dict[str, KafkaListener] = {}
        for spec in self.broker.config.listener_specs("127.0.0.1", 0):
            sock = bind(spec.host, spec.port, spec.name)
            self._sockets.append(sock)
            self.listeners[spec.name] = attach(self.engine, sock, spec, tls)

    def port(self, name: str) -> int:
        return self.listeners[name].node.port

    def close(self) -> None:
        for listener in self.listeners.values():
            listener.close()
        self.broker.close()
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> "ListenersBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

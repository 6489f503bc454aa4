"""Listening sockets, and Kafka's listener names. The ports are taken at start-up so a
port in use is a clear error before anything else happens (connections arriving while
the data directory recovers wait in the listen backlog).

``listeners`` (``PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094``) names each
Kafka listener and its address; ``listener.security.protocol.map`` gives each name its
security protocol (by default each protocol's own name is a listener name, as in Kafka).
"""

from __future__ import annotations

import enum
import errno
import socket
from dataclasses import dataclass


class PortInUseError(Exception):
    pass


def bind(host: str, port: int, what: str) -> socket.socket:
    """Bind and listen on ``host:port``; raise PortInUseError with a clear message."""
    try:
        return socket.create_server((host, port), reuse_port=False)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(f"{what} port {host}:{port} is already in use") from None
        raise PortInUseError(f"cannot listen for {what} on {host}:{port}: {e.strerror}") from None


class SecurityProtocol(enum.Enum):
    """Kafka's ``SecurityProtocol``: whether a listener speaks TLS, SASL, both or neither."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


#: Kafka's default ``listener.security.protocol.map``: each protocol's own name
DEFAULT_PROTOCOL_MAP = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)


@dataclass(frozen=True)
class ListenerSpec:
    """One entry of ``listeners``: ``NAME://host:port`` and its security protocol."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_endpoint(entry: str) -> tuple[str, str, int]:
    """``(NAME, host, port)`` of ``NAME://host:port`` (an IPv6 host in brackets; an
    empty host: every address, as in Kafka). :raise ValueError: not that shape."""
    name, sep, address = entry.strip().partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected NAME://host:port, got {entry.strip()!r}")
    return name.upper(), host.strip("[]") or "0.0.0.0", int(port)


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) as name -> protocol.
    :raise ValueError: an entry without a colon or an unknown protocol."""
    protocols: dict[str, SecurityProtocol] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.upper() not in SecurityProtocol.__members__:
            raise ValueError(f"expected NAME:PROTOCOL with a protocol of {list(SecurityProtocol.__members__)}, "
                             f"got {entry!r}")
        protocols[name.upper()] = SecurityProtocol[protocol.upper()]
    return protocols


def parse_listeners(listeners: str, protocol_map: str) -> list[ListenerSpec]:
    """``listeners`` as specs, each name's protocol from the map (Kafka's rules: names
    unique, each one mapped). :raise ValueError: what is wrong, in Kafka's words."""
    protocols = parse_protocol_map(protocol_map)
    specs: list[ListenerSpec] = []
    for entry in filter(None, (e.strip() for e in listeners.split(","))):
        name, host, port = parse_endpoint(entry)
        if name not in protocols:
            raise ValueError(f"no security protocol defined for listener {name} "
                             f"(listener.security.protocol.map)")
        if any(s.name == name for s in specs):
            raise ValueError(f"each listener must have a different name, {name} is given twice")
        specs.append(ListenerSpec(name, protocols[name], host, port))
    return specs

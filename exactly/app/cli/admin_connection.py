"""The connection of the admin commands (``exactly acls``, ``exactly users``) to a
running broker: ``--bootstrap-server``, and ``--command-config`` as Kafka's tools take
it -- a properties file with the client's security settings, so a password is never
on the command line::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=admin
    sasl.password=admin-secret
    ssl.ca.location=/path/to/ca.pem

(Kafka's ``sasl.jaas.config=... username="admin" password="admin-secret";`` is read
too, and ``ssl.truststore.location`` of a PEM file in place of ``ssl.ca.location``.)
SASL runs SaslHandshake v1 then SaslAuthenticate, PLAIN or SCRAM (``scramp``'s client).
"""

from __future__ import annotations

import argparse
import re
import ssl
import sys
from pathlib import Path
from typing import Callable

import scramp

from exactly.app.listeners import SecurityProtocol
from exactly.app.security.sasl_plain import PLAIN
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import KafkaError, raise_for_code

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_JAAS = re.compile(r'(username|password)\s*=\s*"([^"]*)"')


def add_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--bootstrap-server", required=required, help="host:port of one of the broker's Kafka listeners")
    parser.add_argument("--command-config", type=Path,
                        help="a properties file of client security settings (security.protocol, sasl.mechanism, "
                             "sasl.username, sasl.password, ssl.ca.location)")


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` lines (``#`` and ``!`` comments)."""
    properties = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def connect(args: argparse.Namespace, client_id: str) -> KafkaConnection:
    """A connection to ``--bootstrap-server``, TLS and SASL as ``--command-config`` says.
    :raise OSError: unreachable. :raise ValueError: bad settings. :raise KafkaError: refused."""
    host, _, port = args.bootstrap_server.split(",")[0].strip().rpartition(":")
    properties = read_properties(args.command_config) if args.command_config else {}
    protocol = SecurityProtocol[properties.get("security.protocol", "PLAINTEXT").upper()]
    connection = KafkaConnection(host.strip("[]"), int(port), client_id, 30.0)
    try:
        if protocol.uses_tls:
            cafile = properties.get("ssl.ca.location") or properties.get("ssl.truststore.location")
            context = ssl.create_default_context(cafile=cafile)
            connection.sock = context.wrap_socket(connection.sock, server_hostname=host.strip("[]"))
        if protocol.uses_sasl:
            user, password = _credentials(properties)
            authenticate(connection, properties.get("sasl.mechanism", "GSSAPI").upper(), user, password)
    except BaseException:
        connection.close()
        raise
    return connection


def run_command(args: argparse.Namespace, command: str, work: Callable[[KafkaConnection], None]) -> int:
    """Connect as :func:`connect` does, do ``work`` on the connection, close it: 0, or 1
    with one line on stderr (``exactly <command>: ...``) when unreachable or refused."""
    try:
        connection = connect(args, f"exactly-{command}")
    except (OSError, ValueError, KafkaError) as e:
        print(f"exactly {command}: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    try:
        work(connection)
    except KafkaError as e:
        print(f"exactly {command}: {e.name}: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    return 0


def _credentials(properties: dict[str, str]) -> tuple[str, str]:
    found = dict(_JAAS.findall(properties.get("sasl.jaas.config", "")))
    user = properties.get("sasl.username", found.get("username"))
    password = properties.get("sasl.password", found.get("password"))
    if not user or password is None:
        raise ValueError("a SASL connection needs sasl.username and sasl.password (or sasl.jaas.config)")
    return user, password


def authenticate(connection: KafkaConnection, mechanism: str, user: str, password: str) -> None:
    """Log in on ``connection`` (SaslHandshake v1, SaslAuthenticate v2).
    :raise KafkaError: the broker refused. :raise ValueError: a mechanism this client lacks."""
    response = connection.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    raise_for_code(response.error_code, f"{mechanism} is not enabled; the broker offers {list(response.mechanisms)}")
    if mechanism == PLAIN:
        _exchange(connection, f"\0{user}\0{password}".encode())
        return
    try:
        client = scramp.ScramClient([mechanism], user, password)
    except scramp.ScramException as e:
        raise ValueError(f"unsupported SASL mechanism {mechanism}: {e}") from None
    client.set_server_first(_exchange(connection, client.get_client_first().encode()).decode())
    client.set_server_final(_exchange(connection, client.get_client_final().encode()).decode())


def _exchange(connection: KafkaConnection, token: bytes) -> bytes:
    response = connection.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    raise_for_code(response.error_code, response.error_message or "")
    return bytes(response.auth_bytes)

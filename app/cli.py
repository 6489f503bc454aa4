"""The ``exactly`` command (also ``python run.py``).

``exactly serve`` binds the Kafka and HTTP ports, opens a :class:`~app.broker.Broker`
on the data directory (recovering every partition, migrating the SQLite mirror,
starting the scheduled jobs), attaches the listeners to it and stays up until SIGINT
or SIGTERM, then shuts down cleanly: listeners first, then the broker (in-flight
fsyncs finish, producer state is snapshotted, checkpoints are written). Bad flags,
an unusable data directory, a directory another process holds and a port in use each
exit non-zero with one clear line on stderr.

``exactly db upgrade`` creates or migrates the SQLite mirror ``<data-dir>/exactly.db``
(a no-op when it is current); ``exactly db rebuild`` re-derives it from the logs of a
data directory no broker is serving.

``exactly acls`` is kafka-acls.sh, with its flags, against a running broker
(``app/acl_command.py``); ``exactly users`` adds, lists and removes SASL/SCRAM users
on one (``app/users_command.py``); ``exactly faults`` installs and removes faults on one,
through its HTTP API (``app/faults_command.py``).

``exactly audit GROUP --input T --output U`` asks a running broker's HTTP API whether
the group processed T into U exactly once (``app/audit_command.py``); its exit status
is the verdict.

Kafka listeners: ``--host``/``--kafka-port`` is one PLAINTEXT listener; the config
``listeners`` (``PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094``) replaces it
with several. ``--generate-certificate`` gives SSL listeners a local CA's certificate.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

from app import acl_command, audit_command, faults_command, users_command
from app.broker import Broker
from app.config import BrokerConfig
from app.http import HttpSettings, create_app
from app.http.auth import LOOPBACK_HOSTS
from app.http.server import HttpServer
from app.kafka import KafkaListener, attach as attach_kafka
from app.listeners import ListenerSpec, PortInUseError, bind
from app.security.tls import generate_certificate, server_context
from coordinator.mirror_db import UPGRADE_ERRORS, db_path, upgrade
from storage.errors import KafkaError

log = logging.getLogger("exactly")


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="exactly", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    add_serve_arguments(serve)
    db = sub.add_parser("db", help="manage the SQLite mirror <data-dir>/exactly.db")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade_ = db_sub.add_parser("upgrade", help="create the database or migrate it to the newest schema")
    upgrade_.add_argument("--data-dir", default="data", type=Path, help="data directory (default ./data)")
    rebuild = db_sub.add_parser("rebuild", help="re-derive every row from the logs (with the broker stopped)")
    rebuild.add_argument("--data-dir", default="data", type=Path, help="data directory (default ./data)")
    rebuild.add_argument("--config", action="append", default=[], type=_config_pair, metavar="KEY=VALUE",
                         help="the Kafka configs the broker is served with (repeatable)")
    acls = sub.add_parser("acls", help="add, list or remove ACLs (kafka-acls.sh's flags) on a running broker")
    acl_command.add_arguments(acls)
    audit = sub.add_parser("audit", help="was it exactly once? (a running broker's audit of a group)")
    audit_command.add_arguments(audit)
    users = sub.add_parser("users", help="add, list or remove SASL/SCRAM users on a running broker")
    users_command.add_arguments(users)
    faults = sub.add_parser("faults", help="add, list or remove faults on a running broker (its HTTP API)")
    faults_command.add_arguments(faults)
    return parser


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="data", type=Path, help="data directory (default ./data)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--kafka-port", default=9092, type=int,
                        help="the PLAINTEXT Kafka port (default 9092) when the config listeners is not set")
    parser.add_argument("--http-port", default=8080, type=int, help="HTTP API and web UI port (default 8080)")
    parser.add_argument("--config", action="append", default=[], type=_config_pair, metavar="KEY=VALUE",
                        help="a Kafka config, e.g. --config log.segment.bytes=1048576 (repeatable)")
    parser.add_argument("--generate-certificate", action="store_true",
                        help="SSL listeners without a certificate get one from a local CA created under "
                             "<data-dir>/tls (exactly.ssl.generate=true); the CA's path is printed")


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    config = {**dict(args.config), **({"exactly.ssl.generate": "true"} if args.generate_certificate else {})}
    sockets: list[socket.socket] = []
    try:
        specs = BrokerConfig.from_kafka(config).listener_specs(args.host, args.kafka_port)
        for spec in specs:
            sockets.append(bind(spec.host, spec.port, "Kafka" if len(specs) == 1 else f"Kafka {spec.name}"))
        sockets.append(bind(args.host, args.http_port, "HTTP"))
        broker = Broker(args.data_dir, **config)
    except (PortInUseError, KafkaError) as e:
        print(f"exactly: {e.name}: {e}" if isinstance(e, KafkaError) else f"exactly: {e}", file=sys.stderr)
        _close(sockets)
        return 1
    try:
        stoppers, kafka = attach_listeners(broker, args, sockets[-1], list(zip(specs, sockets)))
    except KafkaError as e:  # the TLS certificate
        print(f"exactly: {e.name}: {e}", file=sys.stderr)
        broker.close()
        _close(sockets)
        return 1
    topics = len(broker.engine.topic_names())
    print(f"exactly: data directory {args.data_dir.resolve()} recovered ({topics} topics), "
          f"cluster id {broker.cluster_id}", flush=True)
    listening = ", ".join(f"{k.spec} (advertised as {k.node.host}:{k.node.port})" for k in kafka)
    print(f"exactly: console and HTTP API on http://{args.host}:{args.http_port}/ ; Kafka on "
          f"{listening}; Ctrl-C to stop", flush=True)
    if broker.config.exactly_ssl_generate and any(k.ssl_context is not None for k in kafka):
        print(f"exactly: TLS certificate from a local CA; clients set ssl.ca.location="
              f"{generate_certificate(args.data_dir).ca.resolve()}", flush=True)
    stop.wait()
    print("exactly: shutting down", flush=True)
    for stop_listener in reversed(stoppers):
        stop_listener()
    clean = broker.close()
    _close(sockets)
    print("exactly: stopped cleanly" if clean else
          "exactly: stopped, uncleanly (see the log): the next start recovers the logs", flush=True)
    return 0


def attach_listeners(broker: Broker, args: argparse.Namespace, http_socket: socket.socket,
                     kafka_sockets: list[tuple[ListenerSpec, socket.socket]]
                     ) -> tuple[list[Callable[[], None]], list[KafkaListener]]:
    """Start the listeners of ``exactly serve`` on the broker's engine, on sockets bound
    before the broker opened; returns what stops each (called in reverse order before
    the broker closes) and the Kafka listeners.
    :raise InvalidConfigError: an SSL listener without a usable certificate."""
    tls = (server_context(broker.config, broker.data_dir)
           if any(spec.protocol.uses_tls for spec, _ in kafka_sockets) else None)
    loopback = ipaddress.ip_address(socket.gethostbyname(args.host)).is_loopback
    settings = HttpSettings(token=broker.config.http_auth_token,
                            token_principal=broker.config.http_auth_token_principal,
                            allowed_hosts=LOOPBACK_HOSTS | {args.host} if loopback else None)
    web = create_app(broker.engine, settings, mirror=broker.mirror)
    http = HttpServer(web, http_socket).start()
    kafka = [attach_kafka(broker.engine, sock, spec, tls) for spec, sock in kafka_sockets]
    return [web.extensions["exactly.history"].stop, http.close, *(k.close for k in kafka)], kafka


def db_upgrade(args: argparse.Namespace) -> int:
    path = db_path(args.data_dir)
    try:
        before, after = upgrade(path)
    except UPGRADE_ERRORS as e:  # one line, not a traceback
        print(f"exactly: cannot migrate {path}: {e}", file=sys.stderr)
        return 1
    change = "already current" if before == after else f"migrated from {before or 'nothing'}"
    print(f"exactly: {path} at schema revision {after} ({change})", flush=True)
    return 0


def db_rebuild(args: argparse.Namespace) -> int:
    if not args.data_dir.is_dir():
        print(f"exactly: no data directory {args.data_dir}", file=sys.stderr)
        return 1
    try:  # no jobs: nothing but the rebuild touches the directory
        broker = Broker(args.data_dir, **{**dict(args.config), "exactly.jobs.enable": False})
    except KafkaError as e:
        print(f"exactly: {e.name}: {e}", file=sys.stderr)
        return 1
    try:
        records = broker.mirror.rebuild()
        broker.mirror.refresh_stats()
    finally:
        broker.close()
    print(f"exactly: {db_path(args.data_dir)} rebuilt from {records} records", flush=True)
    return 0


def _close(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "db":
        return db_upgrade(args) if args.db_command == "upgrade" else db_rebuild(args)
    if args.command == "acls":
        return acl_command.run(args)
    if args.command == "audit":
        return audit_command.run(args)
    if args.command == "users":
        return users_command.run(args)
    if args.command == "faults":
        return faults_command.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""The ``exactly`` command (also ``python run.py``).

``exactly serve`` runs a :class:`~exactly.app.server.Server`: it binds the Kafka and HTTP
ports, opens a :class:`~exactly.app.broker.Broker` on the data directory (recovering every
partition, migrating the SQLite mirror, starting the scheduled jobs), attaches the
listeners to it and stays up until SIGINT or SIGTERM, then shuts down cleanly:
listeners first, then the broker (in-flight fsyncs finish, producer state is
snapshotted, checkpoints are written). Bad flags,
an unusable data directory, a directory another process holds and a port in use each
exit non-zero with one clear line on stderr.

``exactly db upgrade`` creates or migrates the SQLite mirror ``<data-dir>/exactly.db``
(a no-op when it is current); ``exactly db rebuild`` re-derives it from the logs of a
data directory no broker is serving.

``exactly acls`` is kafka-acls.sh, with its flags, against a running broker
(``exactly/app/cli/acls.py``); ``exactly users`` adds, lists and removes SASL/SCRAM users
on one (``exactly/app/cli/users.py``); ``exactly faults`` installs and removes faults on one,
through its HTTP API (``exactly/app/cli/faults.py``). ``exactly events fence ID | timeout ID |
restart [--unclean]`` makes those events happen now on a running broker, through its
HTTP API (``exactly/app/cli/events.py``).

``exactly audit GROUP --input T --output U`` asks a running broker's HTTP API whether
the group processed T into U exactly once (``exactly/app/cli/audit.py``); its exit status
is the verdict.

Kafka listeners: ``--host``/``--kafka-port`` is one PLAINTEXT listener; the config
``listeners`` (``PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094``) replaces it
with several. ``--generate-certificate`` gives SSL listeners a local CA's certificate.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Sequence

from exactly.app.cli import (acls as acl_command, audit as audit_command, events as events_command, faults as faults_command, http_api_client, users as users_command)
from exactly.storage.errors import KafkaError

# The broker's modules (the engine, SQLAlchemy, Alembic, Flask) are imported by the
# commands that open one: a command that talks to a running broker starts fast.

log = logging.getLogger("exactly")


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    http = http_api_client.options()  # --http and --token, before or after the subcommand alike
    parser = argparse.ArgumentParser(prog="exactly", description=__doc__.splitlines()[0], parents=[http])
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
    audit = sub.add_parser("audit", help="was it exactly once? (a running broker's audit of a group)", parents=[http])
    audit_command.add_arguments(audit)
    users = sub.add_parser("users", help="add, list or remove SASL/SCRAM users on a running broker")
    users_command.add_arguments(users)
    faults = sub.add_parser("faults", help="add, list or remove faults on a running broker (its HTTP API)",
                            parents=[http])
    faults_command.add_arguments(faults, http)
    events_command.add_arguments(sub.add_parser("events", help="fence a producer, time a transaction out or "
                                                               "restart the broker, now (through --http)",
                                                parents=[http]), http)
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
    from exactly.app.listeners import PortInUseError
    from exactly.app.server import Server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A signal only wakes the main thread (Python writes its number to the pipe): a handler
    # setting a threading.Event could deadlock, as it runs on the main thread, which may
    # hold that Event's lock when the signal lands.
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
    stopping = (signal.SIGINT, signal.SIGTERM)
    for signum in stopping:
        signal.signal(signum, lambda *_: None)
    config = {**dict(args.config), **({"exactly.ssl.generate": "true"} if args.generate_certificate else {})}
    try:
        server = Server(args.data_dir, host=args.host, kafka_port=args.kafka_port, http_port=args.http_port,
                        **config)
    except PortInUseError as e:
        print(f"exactly: {e}", file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"exactly: {e.name}: {e}", file=sys.stderr)
        return 1
    topics = len(server.engine.topics.topic_names())
    print(f"exactly: data directory {args.data_dir.resolve()} recovered ({topics} topics), "
          f"cluster id {server.cluster_id}", flush=True)
    listening = ", ".join(f"{k.spec} (advertised as {k.node.host}:{k.node.port})" for k in server.kafka_listeners)
    print(f"exactly: console and HTTP API on {server.http_url}/ ; Kafka on {listening}; Ctrl-C to stop",
          flush=True)
    if server.broker.config.exactly_ssl_generate and any(k.ssl_context is not None for k in server.kafka_listeners):
        from exactly.app.security.tls import generate_certificate

        print(f"exactly: TLS certificate from a local CA; clients set ssl.ca.location="
              f"{generate_certificate(args.data_dir).ca.resolve()}", flush=True)
    while os.read(wake, 1)[0] not in stopping:
        pass
    print("exactly: shutting down", flush=True)
    clean = server.close()
    print("exactly: stopped cleanly" if clean else
          "exactly: stopped, uncleanly (see the log): the next start recovers the logs", flush=True)
    return 0


def db_upgrade(args: argparse.Namespace) -> int:
    from exactly.coordinator.mirror_db import UPGRADE_ERRORS, db_path, upgrade

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
    from exactly.app.broker import Broker
    from exactly.coordinator.mirror_db import db_path

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in http_api_client.COMMANDS and http_api_client.given(args):
        parser.error(f"{' and '.join(http_api_client.given(args))}: only for the commands that call a running "
                     f"broker's HTTP API ({', '.join(http_api_client.COMMANDS)})")
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
    if args.command == "events":
        return events_command.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())

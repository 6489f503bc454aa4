"""``exactly faults``: install, list and remove faults on a running broker, through its
HTTP API (``/v3/clusters/<id>/faults``; ``--http URL``, default
``http://127.0.0.1:8080``; ``--token`` when the API wants a bearer token)::

    exactly faults add --api Produce --topic orders --error NOT_ENOUGH_REPLICAS --count 3
    exactly faults add --api EndTxn --action close-after --count 1
    exactly faults event coordinator-load-in-progress --coordinator transaction --duration-ms 300
    exactly faults list
    exactly faults remove 3
    exactly faults clear

``add`` and ``event`` print the id of each fault installed; ``list`` one line per
fault, in the order they are tried, with how often each fired. A refused request
exits 1 with the broker's message.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from exactly.app.cli import http_api_client
from exactly.app.faults.events import Coordinator, Event
from exactly.app.faults.fault import Action
from exactly.app.cli.http_api_client import HttpApi, HttpApiError


def add_arguments(parser: argparse.ArgumentParser, http: argparse.ArgumentParser) -> None:
    """The subcommands, each taking ``http``'s ``--http`` and ``--token`` too."""
    sub = parser.add_subparsers(dest="faults_command", required=True)
    add = sub.add_parser("add", help="install a fault (tried after those installed before it)", parents=[http])
    add.add_argument("--action", choices=[a.value for a in Action],
                     help="default: error with --error, delay with --delay-ms")
    add.add_argument("--api", action="append", default=[], help="Kafka API name or key (repeatable; default any)")
    for flag in ("--client-id", "--principal", "--topic", "--group", "--transactional-id", "--error"):
        add.add_argument(flag)
    add.add_argument("--partition", type=int)
    for flag in ("--delay-ms", "--count", "--seed", "--duration-ms"):
        add.add_argument(flag, type=int)
    add.add_argument("--probability", type=float)
    event = sub.add_parser("event", help="install an event preset's faults", parents=[http])
    event.add_argument("event", choices=[e.value for e in Event])
    event.add_argument("--duration-ms", type=int)
    event.add_argument("--coordinator", choices=[c.value for c in Coordinator], default="transaction")
    sub.add_parser("list", help="the installed faults, in the order they are tried", parents=[http])
    remove = sub.add_parser("remove", help="remove one fault", parents=[http])
    remove.add_argument("fault_id", type=int)
    sub.add_parser("clear", help="remove every fault", parents=[http])


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args, http_api_client.api(args))
    except HttpApiError as e:
        print(f"exactly faults: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, api: HttpApi) -> int:
    def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return api.call(method, f"{api.cluster()}/{path}", body)

    command = args.faults_command
    if command == "add":
        fields = ("action", "client_id", "principal", "topic", "partition", "group", "transactional_id", "error",
                  "delay_ms", "count", "probability", "seed", "duration_ms")
        body = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
        fault = call("POST", "faults", {**body, "api": args.api})
        print(fault["fault_id"])
    elif command == "event":
        body = {"event": args.event, "coordinator": args.coordinator, "duration_ms": args.duration_ms}
        for fault in call("POST", "faults:event", body)["data"]:
            print(fault["fault_id"])
    elif command == "list":
        for fault in call("GET", "faults")["data"]:
            print(describe(fault))
    elif command == "remove":
        call("DELETE", f"faults/{args.fault_id}")
    else:
        call("DELETE", "faults")
    return 0


def describe(fault: dict[str, Any]) -> str:
    """One line: id, what it does, what it matches, its budget and how often it fired."""
    does = {"error": fault["error"], "delay": f"delay {fault['delay_ms']} ms"}.get(fault["action"], fault["action"])
    matched = [f"{name}={fault[name]}" for name in ("client_id", "principal", "topic", "partition", "group",
                                                     "transactional_id") if fault[name] is not None]
    budget = "every" if fault["count"] is None else f"first {fault['count']}"
    if fault["probability"] < 1:
        budget += f" p={fault['probability']} seed={fault['seed']}"
    window = "" if fault["remaining_ms"] is None else f", {fault['remaining_ms']} ms left"
    return (f"{fault['fault_id']}\t{does}\t{','.join(fault['api']) or 'any API'}\t{' '.join(matched) or '-'}\t"
            f"{budget}{window}\tfired {fault['fired']}" + (f"\t({fault['event']})" if fault["event"] else ""))

"""``exactly acls``: kafka-acls.sh for this broker (or any Kafka), over the Kafka port.

The flags are kafka-acls.sh's: ``--add`` / ``--remove`` / ``--list``; resources
``--topic`` (repeatable), ``--group``, ``--transactional-id``, ``--cluster``, with
``--resource-pattern-type literal|prefixed`` (``match`` and ``any`` too for
``--list`` and ``--remove``; any case); entries ``--allow-principal`` /
``--deny-principal`` (repeatable), ``--allow-host`` / ``--deny-host`` (default ``*``),
``--operation`` (repeatable; default All) or the ``--producer`` (``--idempotent``) /
``--consumer`` shortcuts; ``--principal`` narrows ``--list``. As kafka-acls.sh, it
talks to a running broker (``--bootstrap-server``, ``--command-config`` for a SASL or
TLS listener: ``exactly/app/cli/admin_connection.py``): CreateAcls, DescribeAcls,
DeleteAcls.

It refuses what Kafka 4.4's ``AclCommand`` refuses, with its messages, before
connecting (:func:`check`: ``tests/test_acls_cli.py`` holds the table of flag
combinations with kafka-acls.sh's verdict for each, and checks it against the real
``AclCommand`` when Kafka's jars are there); it prints what ``AclCommand`` prints:
"Adding ACLs for resource" on ``--add``, "Current ACLs for resource" on ``--list``, and
on ``--remove`` the question "Are you sure ...? (y/n)" answered from stdin, or nothing
with ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

from exactly.app.cli import admin_connection
from exactly.app.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import raise_for_code

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
#: the version each ACL API is sent at (Exactly and Kafka 4.x both serve it)
VERSION = 3
O = AclOperation
#: kafka-acls.sh's --producer and --consumer: the operations on each resource type
PRODUCER = {ResourceType.TOPIC: (O.WRITE, O.DESCRIBE, O.CREATE), ResourceType.TRANSACTIONAL_ID: (O.WRITE, O.DESCRIBE)}
CONSUMER = {ResourceType.TOPIC: (O.READ, O.DESCRIBE), ResourceType.GROUP: (O.READ,)}


def _operation(text: str) -> AclOperation:
    """kafka-acls.sh's operation names (``Write``, ``ClusterAction``, ``IdempotentWrite``)."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == wanted and op not in (O.UNKNOWN, O.ANY):
            return op
    raise argparse.ArgumentTypeError(f"unknown operation {text!r}")


def _pattern_type(text: str) -> str:
    """kafka-acls.sh's pattern types, in any case (``PREFIXED``, ``Prefixed``)."""
    wanted = text.lower()
    if wanted not in PATTERN_TYPES:
        raise argparse.ArgumentTypeError(f"unknown resource pattern type {text!r}: {', '.join(PATTERN_TYPES)}")
    return wanted


#: the pattern types kafka-acls.sh takes (match and any only filter: --list, --remove)
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    admin_connection.add_arguments(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for flag in ("--add", "--remove", "--list"):
        action.add_argument(flag, action="store_true")
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", default="literal", type=_pattern_type)
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host", "--principal"):
        parser.add_argument(flag, action="append", default=[])
    parser.add_argument("--operation", action="append", default=[], type=_operation)
    parser.add_argument("--producer", action="store_true")
    parser.add_argument("--consumer", action="store_true")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--force", action="store_true", help="--remove without asking (y/n) first")


def _refuse(message: str) -> SystemExit:
    return SystemExit(f"exactly acls: {message}")


def check(args: argparse.Namespace) -> None:
    """Refuse what kafka-acls.sh (Kafka 4.4's ``AclCommandOptions.checkArgs`` and
    ``AclCommand``'s per-resource checks) refuses, with its message.

    :raise SystemExit: exit code 1 and the message, as ``AclCommand``'s usage errors."""
    shortcut = "producer" if args.producer else "consumer" if args.consumer else None
    if args.list:
        for flag in ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal"):
            if getattr(args, flag):
                raise _refuse(f'Option "[list]" can\'t be used with option "[{flag.replace("_", "-")}]"')
    if shortcut:
        for flag in ("operation", "deny_principal", "deny_host"):
            if getattr(args, flag):
                raise _refuse(f'Option "[{shortcut}]" can\'t be used with option "[{flag.replace("_", "-")}]"')
    if args.idempotent and not args.producer:
        raise _refuse("The --idempotent option is only available if --producer is set")
    if args.producer and not args.topic:
        raise _refuse("With --producer you must specify a --topic")
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise _refuse("With --consumer you must specify a --topic and a --group and no --cluster or "
                      "--transactional-id option should be specified.")
    if args.add and args.resource_pattern_type not in ("literal", "prefixed"):
        raise _refuse(f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is not valid "
                      "when adding acls.")
    if args.add and not (args.allow_principal or args.deny_principal):
        raise _refuse("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    if (args.add or args.remove) and not _patterns(args):
        raise _refuse("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                      "--transactional-id <transactional-id>")
    for resource_type in {p.resource_type for p in _patterns(args)}:
        supported = SUPPORTED_OPERATIONS[resource_type] | {O.ALL}
        if not set(_operations(args, resource_type)) <= supported:
            raise _refuse(f"ResourceType {resource_type.name} only supports operations "
                          f"[{', '.join(sorted(op.name for op in supported))}]")


def _patterns(args: argparse.Namespace) -> list[ResourcePattern]:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    named = ((ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
             (ResourceType.TRANSACTIONAL_ID, args.transactional_id),
             (ResourceType.CLUSTER, [CLUSTER_NAME] if args.cluster or (args.producer and args.idempotent) else []))
    return [ResourcePattern(rtype, name, pattern_type) for rtype, names in named for name in names]


def _operations(args: argparse.Namespace, resource_type: ResourceType) -> tuple[AclOperation, ...]:
    """The operations of the entries on the resource type: the shortcuts' (both, with
    --producer and --consumer), IdempotentWrite on the cluster only with --producer
    --idempotent (check refuses it otherwise), or --operation (default All)."""
    if args.producer or args.consumer:
        if resource_type is ResourceType.CLUSTER:
            return (O.IDEMPOTENT_WRITE,)
        ops = (PRODUCER.get(resource_type, ()) if args.producer else ()) + (
            CONSUMER.get(resource_type, ()) if args.consumer else ())
        return tuple(dict.fromkeys(ops))
    return tuple(args.operation) or (O.ALL,)


def _entries(args: argparse.Namespace, resource_type: ResourceType) -> list[AccessControlEntry]:
    entries = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        entries += [AccessControlEntry(principal, host, op, permission) for principal in principals
                    for host in hosts or [WILDCARD_HOST] for op in _operations(args, resource_type)]
    return entries


def _entries_text(bindings: Iterable[AclBinding]) -> str:
    """AclCommand's list of entries: a tab before each, one a line."""
    return "\n\t".join(_describe(b) for b in bindings)


def _describe(binding: AclBinding) -> str:
    e = binding.entry
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission_type.name})")


def _pattern_text(p: ResourcePattern) -> str:
    return f"ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, patternType={p.pattern_type.name})"


def _filter_body(f: AclBindingFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission_type)}


class AclAdmin:
    """CreateAcls, DescribeAcls and DeleteAcls over one connection."""

    def __init__(self, connection: KafkaConnection) -> None:
        self.connection = connection

    def create(self, bindings: Iterable[AclBinding]) -> None:
        creations = [{"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                      "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                      "host": b.entry.host, "operation": int(b.entry.operation),
                      "permission_type": int(b.entry.permission_type)} for b in bindings]
        for result in self.connection.request(CREATE_ACLS, VERSION, {"creations": creations}).results:
            raise_for_code(result.error_code, result.error_message or "")

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        response = self.connection.request(DESCRIBE_ACLS, VERSION, _filter_body(acl_filter))
        raise_for_code(response.error_code, response.error_message or "")
        return [AclBinding(ResourcePattern(ResourceType(r.resource_type), r.resource_name,
                                           PatternType(r.pattern_type)),
                           AccessControlEntry(a.principal, a.host, AclOperation(a.operation),
                                              AclPermissionType(a.permission_type)))
                for r in response.resources for a in r.acls]

    def delete(self, filters: list[AclBindingFilter]) -> None:
        response = self.connection.request(DELETE_ACLS, VERSION, {"filters": [_filter_body(f) for f in filters]})
        for result in response.filter_results:
            raise_for_code(result.error_code, result.error_message or "")


def _resource_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """One filter per named resource (every resource when none is named)."""
    patterns = _patterns(args)
    if not patterns:
        return [AclBindingFilter()]
    return [AclBindingFilter(p.resource_type, p.name, p.pattern_type) for p in patterns]


def _list(admin: AclAdmin, args: argparse.Namespace) -> None:
    found: dict[ResourcePattern, list[AclBinding]] = {}
    for acl_filter in _resource_filters(args):
        for binding in admin.describe(acl_filter):
            if not args.principal or binding.entry.principal in args.principal:
                found.setdefault(binding.pattern, []).append(binding)
    for pattern, bindings in found.items():
        print(f"Current ACLs for resource `{_pattern_text(pattern)}`:\n\t{_entries_text(bindings)}\n")


def _add(admin: AclAdmin, args: argparse.Namespace) -> None:
    bindings = [AclBinding(p, e) for p in _patterns(args) for e in _entries(args, p.resource_type)]
    for pattern in dict.fromkeys(b.pattern for b in bindings):
        print(f"Adding ACLs for resource `{_pattern_text(pattern)}`: \n \t"
              f"{_entries_text(b for b in bindings if b.pattern == pattern)}\n")
    admin.create(bindings)


def _confirmed(question: str) -> bool:
    """AclCommand's ``confirmAction``: the question, then a line of stdin; only y goes on."""
    print(question, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def _remove(admin: AclAdmin, args: argparse.Namespace) -> None:
    """Per resource, AclCommand's question (skipped with --force), then DeleteAcls."""
    filters = []
    for p in _patterns(args):
        entries = _entries(args, p.resource_type)
        if entries:
            question = (f"Are you sure you want to remove ACLs: \n \t"
                        f"{_entries_text(AclBinding(p, e) for e in entries)} \n from resource filter "
                        f"`{_pattern_text(p)}`? (y/n)")
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{_pattern_text(p)}`? (y/n)"
        if not args.force and not _confirmed(question):
            continue
        filters += [AclBindingFilter(p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation,
                                     e.permission_type) for e in entries] or [
            AclBindingFilter(p.resource_type, p.name, p.pattern_type)]
    if filters:
        admin.delete(filters)


def run(args: argparse.Namespace) -> int:
    """The ``exactly acls`` command; 1 with one line on stderr when it is refused (by
    :func:`check`, before connecting, or by the broker)."""
    check(args)
    action = _add if args.add else _remove if args.remove else _list
    return admin_connection.run_command(args, "acls", lambda connection: action(AclAdmin(connection), args))

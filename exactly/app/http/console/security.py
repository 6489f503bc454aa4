"""The console's security pages: ACLs (a filtered list, add, remove), Users (who has
SCRAM credentials, for which mechanisms) and "who may do what": for one principal,
what it may do on each topic, group and transactional id -- and why, naming the ACLs
that allow it, the one that denies it, ``super.users``, or
``allow.everyone.if.no.acl.found`` (``StandardAuthorizer.explain``). None of Kafka's
tools answers that.

The ACL writes are POST forms with the session's CSRF token (``exactly/app/http/auth.py``),
and each page needs what its Kafka API needs (DescribeAcls, CreateAcls, DeleteAcls,
DescribeUserScramCredentials): Describe on the Cluster to look, Alter to change.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import render_template, request, url_for

from exactly.app.engine import mirror_reads
from exactly.app.http import access as http_access, current_engine, mirror_db
from exactly.app.http.api import models
from exactly.app.http.api.acls import acl_binding, acl_filter, create
from exactly.app.http.auth import request_principal
from exactly.app.http.errors import log_mirror_error
from exactly.app.http.access import kafka
from exactly.app.http.console.blueprint import done, view
from exactly.app.http.api.validation import parse, query
from exactly.app.security.acl import CLUSTER_NAME, AclBinding, AclBindingFilter, AclOperation, PatternType, ResourceType
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.principal import KafkaPrincipal
from exactly.storage import errors as e

log = logging.getLogger(__name__)

O = AclOperation
#: what "who may do what" asks of each resource type, and the order it shows them in
OPERATIONS_SHOWN: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (O.READ, O.WRITE, O.DESCRIBE, O.CREATE, O.DELETE, O.ALTER),
    ResourceType.GROUP: (O.READ, O.DESCRIBE, O.DELETE),
    ResourceType.TRANSACTIONAL_ID: (O.WRITE, O.DESCRIBE),
    ResourceType.CLUSTER: (O.DESCRIBE, O.CREATE, O.ALTER, O.IDEMPOTENT_WRITE, O.CLUSTER_ACTION),
}


def acl_text(binding: AclBinding) -> str:
    """One line, as kafka-acls.sh would say it."""
    p, entry = binding.pattern, binding.entry
    return (f"{entry.permission_type.name} {entry.principal} {entry.operation.name} on {p.resource_type.name} "
            f"{p.name!r} ({p.pattern_type.name}) from host {entry.host}")


# -- ACLs -------------------------------------------------------------------------------------


@view("/acls", kafka(ApiKey.DESCRIBE_ACLS))
def acls():
    engine = current_engine()
    wanted = query(models.AclFilter)
    found, disabled = [], not engine.access.authorizer_enabled
    if not disabled:
        found = engine.call(engine.access.describe_acls, acl_filter(wanted))
    rows = sorted(found, key=lambda b: (b.pattern.resource_type, b.pattern.name, b.entry.principal,
                                        b.entry.operation, b.entry.permission_type))
    return render_template("acls.html", acls=rows, wanted=wanted, disabled=disabled, page_path=request.full_path,
                           choices=_choices())


def _choices() -> dict[str, tuple[str, ...]]:
    """The select boxes' options: filters may say ANY (and MATCH), an ACL may not."""
    return {"resource_type": models.ACL_RESOURCE_TYPES, "pattern_type": models.ACL_PATTERN_TYPES,
            "operation": models.ACL_OPERATIONS, "permission": models.ACL_PERMISSIONS,
            "filter_only": models.FILTER_ONLY}


def _form() -> dict[str, str]:
    """The posted ACL fields, empty ones left out (their defaults apply)."""
    return {name: value.strip() for name, value in request.form.items()
            if name in models.CreateAcl.model_fields and value.strip()}


@view("/acls/add", kafka(ApiKey.CREATE_ACLS), methods=("POST",))
def add_acl():
    target = url_for("ui.acls")
    try:
        binding = acl_binding(parse(models.CreateAcl, _form()))
        create([binding])
    except e.KafkaError as error:
        return done(f"Could not add the ACL: {error.name} — {error}", "error", target)
    return done(f"Added: {acl_text(binding)}.", "success", target)


@view("/acls/remove", kafka(ApiKey.DELETE_ACLS), methods=("POST",))
def remove_acl():
    target = url_for("ui.acls")
    try:
        exact = acl_filter(parse(models.AclFilter, _form()))
        engine = current_engine()
        (removed,) = engine.call(engine.access.delete_acls, [exact])
        if not isinstance(removed, list):
            raise removed
    except e.KafkaError as error:
        return done(f"Could not remove the ACL: {error.name} — {error}", "error", target)
    if not removed:
        return done("No such ACL (someone removed it already).", "error", target)
    return done(f"Removed: {'; '.join(acl_text(b) for b in removed)}.", "success", target)


# -- users ------------------------------------------------------------------------------------


@view("/users", kafka(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS))
def users():
    """Who has SCRAM credentials, from the SQLite mirror's ``scram_credentials`` (the
    broker's ``__cluster_metadata`` mirrored; never a salt or a key)."""
    db, found, error = mirror_db(), [], None
    if db is not None:
        try:
            found = mirror_reads.scram_credentials(db)
        except Exception as failure:  # the mirror is optional: the page says so
            log_mirror_error(log, failure, "reading the SQLite mirror failed")
            error = "The SQLite mirror could not be read (the broker's log says why)."
    by_user: dict[str, list[dict[str, Any]]] = {}
    for row in found:
        by_user.setdefault(row["user_name"], []).append(row)
    return render_template("users.html", users=by_user, mirror=db is not None, error=error)


# -- who may do what ----------------------------------------------------------------------------


def _names(engine, resource_type: ResourceType) -> set[str]:
    """On the loop: the resources of a type worth asking about -- those that exist, and
    those a LITERAL ACL names (a topic granted before it is created)."""
    existing = {
        ResourceType.TOPIC: lambda: engine.topics.topic_names(),
        ResourceType.GROUP: lambda: [g.group_id for g in engine.groups.list_groups()],
        ResourceType.TRANSACTIONAL_ID: lambda: [tid for tid, _ in engine.transactions.list_transactions()],
        ResourceType.CLUSTER: lambda: [CLUSTER_NAME],
    }[resource_type]()
    named = []
    if engine.access.authorizer_enabled:
        named = [b.pattern.name for b in engine.access.describe_acls(
            AclBindingFilter(resource_type, pattern_type=PatternType.LITERAL))]
    return {*existing, *named} - {"*"}


def who_may(engine, principal: str, host: str) -> list[dict[str, Any]]:
    """On the loop: for each resource, each operation's ``Decision`` (``Access.explain``)."""
    rows = []
    for resource_type, operations in OPERATIONS_SHOWN.items():
        for name in sorted(_names(engine, resource_type)):
            decisions = [(op, engine.access.explain(principal, host, op, resource_type, name)) for op in operations]
            rows.append({"resource_type": resource_type.name, "name": name, "decisions": decisions})
    return rows


@view("/access", kafka(ApiKey.DESCRIBE_ACLS, http_access.body(ResourceType.CLUSTER)))
def access():
    """Who may do what, and why. About oneself anyone may ask (the rows of what one may
    do something with: the ACLs behind them name oneself or everyone); about another
    principal it needs what DescribeAcls needs, as it shows the ACLs behind each answer."""
    me = str(request_principal())
    principal = request.args.get("principal", "").strip() or me
    host = request.args.get("host", "").strip() or (request.remote_addr or "*")
    KafkaPrincipal.parse(principal)  # INVALID_REQUEST (a 400 page) unless Type:name
    if principal != me or host != (request.remote_addr or "*"):
        http_access.require(ResourceType.CLUSTER, [CLUSTER_NAME])
    engine = current_engine()
    rows = engine.call(who_may, engine, principal, host)
    if not http_access.may("DESCRIBE", "CLUSTER", CLUSTER_NAME):
        rows = [r for r in rows if any(decision.allowed for _, decision in r["decisions"])]
    sections = [(t.name, OPERATIONS_SHOWN[t], [r for r in rows if r["resource_type"] == t.name])
                for t in OPERATIONS_SHOWN]
    return render_template("access.html", principal=principal, host=host, sections=sections,
                           enabled=engine.access.authorizer_enabled, acl_text=acl_text)

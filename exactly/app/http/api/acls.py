"""ACLs over HTTP, as Confluent REST Proxy v3 has them: ``/v3/clusters/<id>/acls``.

* ``GET`` lists the ACLs a filter matches (query parameters ``resource_type``,
  ``resource_name``, ``pattern_type``, ``principal``, ``host``, ``operation``,
  ``permission``; Kafka's enum names, any case) -- DescribeAcls;
* ``POST`` creates one ACL: 201, no body, ``Location`` the search that finds it -- CreateAcls;
* ``DELETE`` with the same filter removes what it matches and answers them -- DeleteAcls;
* ``POST .../acls:batch`` creates several at once: 204.

The engine does the work (``Access.describe_acls``/``create_acls``/``delete_acls``,
durable in ``__cluster_metadata``); without an authorizer it is SECURITY_DISABLED,
400 / 40002 as the proxy answers it. What each needs is what DescribeAcls, CreateAcls
and DeleteAcls need on the Kafka port: Describe on the Cluster lists, Alter changes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, jsonify

from exactly.app.http import current_engine
from exactly.app.http.access import kafka
from exactly.app.http.api import models
from exactly.app.http.api.resources import cluster_id, listing, url
from exactly.app.http.api.route import CHANGES, CLUSTER_PATH, Route, declare
from exactly.app.http.api.validation import body, query
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

bp = Blueprint("acls", __name__)
ACLS = CLUSTER_PATH + "/acls"


def acl_filter(wanted: models.AclFilter) -> AclBindingFilter:
    """The query as Kafka's filter (an empty name, principal or host: any)."""
    return AclBindingFilter(ResourceType[wanted.resource_type], wanted.resource_name or None,
                            PatternType[wanted.pattern_type], wanted.principal or None, wanted.host or None,
                            AclOperation[wanted.operation], AclPermissionType[wanted.permission])


def acl_binding(wanted: models.CreateAcl) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType[wanted.resource_type], wanted.resource_name,
                                      PatternType[wanted.pattern_type]),
                      AccessControlEntry(wanted.principal, wanted.host, AclOperation[wanted.operation],
                                         AclPermissionType[wanted.permission]))


def _fields(binding: AclBinding) -> dict[str, str]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": p.resource_type.name, "resource_name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission": e.permission_type.name}


def _search_url(binding: AclBinding) -> str:
    """The search that finds exactly this ACL (the proxy's ``self`` and ``Location``)."""
    return f"{url('acls')}?{urlencode(_fields(binding))}"


def acl_resource(binding: AclBinding) -> dict[str, Any]:
    return {"kind": "KafkaAcl", "metadata": {"self": _search_url(binding), "resource_name": None},
            "cluster_id": cluster_id(), **_fields(binding)}


def _ordered(bindings: list[AclBinding]) -> list[AclBinding]:
    return sorted(bindings, key=lambda b: tuple(_fields(b).values()))


def create(bindings: list[AclBinding]) -> None:
    """CreateAcls. :raise KafkaError: the first refusal (Kafka answers each binding on
    its own: the others are created)."""
    engine = current_engine()
    refused = [error for error in engine.call(engine.access.create_acls, bindings) if error is not None]
    if refused:
        raise refused[0]


@declare(bp, Route("get", ACLS, "Search ACLs", "ACL", 200, models.listing(models.Acl), (), query=models.AclFilter,
                   description="DescribeAcls: the ACLs the filter matches. Without an authorizer: SECURITY_DISABLED "
                               "(400).", needs=kafka(ApiKey.DESCRIBE_ACLS)))
def search_acls():
    engine = current_engine()
    found = engine.call(engine.access.describe_acls, acl_filter(query(models.AclFilter)))
    return jsonify(listing("KafkaAclList", ("acls",), [acl_resource(b) for b in _ordered(found)]))


@declare(bp, Route("post", ACLS, "Create ACL", "ACL", 201, None, CHANGES, body=models.CreateAcl,
                   description="CreateAcls: durable in __cluster_metadata before it applies; Location is the search "
                               "that finds it.", needs=kafka(ApiKey.CREATE_ACLS)))
def create_acl():
    binding = acl_binding(body(models.CreateAcl))
    create([binding])
    response = Response(status=201)
    response.headers["Location"] = _search_url(binding)
    return response


@declare(bp, Route("delete", ACLS, "Delete ACLs", "ACL", 200, models.DeletedAcls, CHANGES, query=models.AclFilter,
                   description="DeleteAcls: removes every ACL the filter matches and answers them.",
                   needs=kafka(ApiKey.DELETE_ACLS)))
def delete_acls():
    engine = current_engine()
    (result,) = engine.call(engine.access.delete_acls, [acl_filter(query(models.AclFilter))])
    if not isinstance(result, list):
        raise result
    return jsonify({"data": [acl_resource(b) for b in _ordered(result)]})


@declare(bp, Route("post", ACLS + ":batch", "Batch create ACLs", "ACL", 204, None, CHANGES, body=models.CreateAcls,
                   needs=kafka(ApiKey.CREATE_ACLS)))
def create_acls_batch():
    create([acl_binding(item) for item in body(models.CreateAcls).data])
    return "", 204

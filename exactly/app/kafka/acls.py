"""ACL management: CreateAcls, DescribeAcls, DeleteAcls (Kafka's ``AclApis``).

With no authorizer configured every request is answered SECURITY_DISABLED, as Kafka
answers it; otherwise each creation and each filter gets its own error (INVALID_REQUEST
for what Kafka refuses: ANY or MATCH in an ACL, UNKNOWN anywhere, an empty resource
name, a principal that is not ``Type:name``). Managing ACLs needs ALTER (create,
delete) or DESCRIBE (describe) on the cluster (:func:`check_cluster_access`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, RequestContext, error_code, serves
from exactly.app.security import acl
from exactly.storage.errors import InvalidRequestError, KafkaError, SecurityDisabledError

T = TypeVar("T")


def check_cluster_access(ctx: RequestContext, api: ApiKey) -> None:
    """The CLUSTER check of the ACL APIs (Kafka's ``authHelper.authorize(CLUSTER, ...)``).

    :raise SecurityDisabledError: no authorizer is configured.
    :raise ClusterAuthorizationFailedError: the principal may not (``authorization.TABLE``)."""
    if not ctx.engine.access.authorizer_enabled:
        raise SecurityDisabledError("no authorizer is configured (authorizer.class.name)")
    authorization.check_cluster(ctx, api)


def _code(enum_type: Any, value: int) -> Any:
    """A wire code as its enum; :raise InvalidRequestError: a code Kafka does not define."""
    try:
        return enum_type(value)
    except ValueError:
        raise InvalidRequestError(f"{value} is not a {enum_type.__name__}") from None


def _binding(creation: Any) -> acl.AclBinding:
    return acl.AclBinding(
        acl.ResourcePattern(_code(acl.ResourceType, creation.resource_type), creation.resource_name,
                            _code(acl.PatternType, creation.resource_pattern_type)),
        acl.AccessControlEntry(creation.principal, creation.host, _code(acl.AclOperation, creation.operation),
                               _code(acl.AclPermissionType, creation.permission_type)))


def _filter(f: Any) -> acl.AclBindingFilter:
    return acl.AclBindingFilter(
        _code(acl.ResourceType, f.resource_type_filter), f.resource_name_filter,
        _code(acl.PatternType, f.pattern_type_filter),
        f.principal_filter, f.host_filter, _code(acl.AclOperation, f.operation),
        _code(acl.AclPermissionType, f.permission_type))


def _parse_each(items: Iterable[Any], parse: Callable[[Any], T]) -> list[T | KafkaError]:
    """Each wire entry parsed, or why it could not be (answered for that entry alone)."""
    parsed: list[T | KafkaError] = []
    for item in items:
        try:
            parsed.append(parse(item))
        except KafkaError as e:
            parsed.append(e)
    return parsed


def _error(e: KafkaError | None) -> dict:
    return {"error_code": error_code(e), "error_message": None if e is None else str(e)}


@serves(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, request: Any) -> dict:
    try:
        check_cluster_access(ctx, ApiKey.CREATE_ACLS)
    except KafkaError as e:
        return {"results": [_error(e) for _ in request.creations]}
    bindings = _parse_each(request.creations, _binding)
    created = iter(await ctx.engine.access.create_acls([b for b in bindings if isinstance(b, acl.AclBinding)]))
    return {"results": [_error(b if isinstance(b, KafkaError) else next(created)) for b in bindings]}


def _description(binding: acl.AclBinding) -> dict:
    e = binding.entry
    return {"principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission_type)}


@serves(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, request: Any) -> dict:
    try:
        check_cluster_access(ctx, ApiKey.DESCRIBE_ACLS)
        found = ctx.engine.access.describe_acls(_filter(request))
    except KafkaError as e:
        return {**_error(e), "resources": []}
    resources: dict[acl.ResourcePattern, list[dict]] = {}
    for binding in found:
        resources.setdefault(binding.pattern, []).append(_description(binding))
    return {**_error(None), "resources": [
        {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
         "acls": acls} for p, acls in resources.items()]}


def _matching(binding: acl.AclBinding) -> dict:
    p = binding.pattern
    return {**_error(None), **_description(binding), "resource_type": int(p.resource_type),
            "resource_name": p.name, "pattern_type": int(p.pattern_type)}


@serves(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, request: Any) -> dict:
    try:
        check_cluster_access(ctx, ApiKey.DELETE_ACLS)
    except KafkaError as e:
        return {"filter_results": [{**_error(e), "matching_acls": []} for _ in request.filters]}
    filters = _parse_each(request.filters, _filter)
    deleted = iter(await ctx.engine.access.delete_acls([f for f in filters if isinstance(f, acl.AclBindingFilter)]))
    results = []
    for f in filters:
        outcome = f if isinstance(f, KafkaError) else next(deleted)
        if isinstance(outcome, KafkaError):
            results.append({**_error(outcome), "matching_acls": []})
        else:
            results.append({**_error(None), "matching_acls": [_matching(b) for b in outcome]})
    return {"filter_results": results}

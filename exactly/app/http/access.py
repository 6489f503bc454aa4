"""Each HTTP request authorized as its principal, as the same request on the Kafka port.

Every view says what it needs where it is registered -- a REST route in its
:class:`~exactly.app.http.api.route.Route`, a console page in
``exactly/app/http/console/blueprint.py``'s ``page`` and ``view`` -- as :class:`Need` values:

* :func:`kafka`: what a Kafka API needs for the same act, read from the row of
  ``exactly/app/kafka/authorization.py``'s ``TABLE`` that the Kafka handlers check (reading
  records is Fetch's Read on the topic, creating a topic CreateTopics' Create on the
  topic or on the cluster), so a page, a route and the Kafka port cannot disagree;
* :func:`own`: an act Kafka has no API for (faults, events on demand, the audit, the
  console's broker-wide pages), with its rule stated here -- seeing what changes every
  client's answers is Describe on the cluster, changing it Alter, acting as the broker
  (a timeout, a restart) ClusterAction;
* :data:`OPEN`: nothing (what Metadata answers anyone: the cluster and its broker; the
  sign-in page).

A need is checked where its resource's name is known (:class:`Where`): a path
argument, the cluster or any resource of a type before the view runs (:func:`init_app`),
a name in the body by the view (:func:`require`), the names of a list, which the view
filters (:func:`visible`), as Kafka filters Metadata's topics and ListTransactions.
Every answer comes from the engine's ``authorize`` (which logs and counts denials), so
with no authorizer nothing changes; a denial is the Kafka error of the resource type
-- 403, its name and code in the JSON body (``exactly/app/http/errors.py``).
tests/test_http_acls.py checks that every endpoint has declared its needs.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from flask import Flask, current_app, request

from exactly.app.http import current_engine
from exactly.app.engine.access import never_served
from exactly.app.http.auth import request_principal
from exactly.app.kafka.authorization import Rule, rule
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.acl import CLUSTER_NAME, DENIED, AclOperation, ResourceType

if TYPE_CHECKING:
    from exactly.app.engine import Engine

V = TypeVar("V", bound=Callable[..., Any])
O = AclOperation
TOPIC, GROUP, TXN, CLUSTER = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID,
                              ResourceType.CLUSTER)


class Where(enum.Enum):
    """Where a need's resource name comes from, and so who checks it."""

    CLUSTER = "the cluster, before the view runs"
    PATH = "a path argument, before the view runs"
    ANY = "any resource of the type (Kafka's authorizeByResourceType), before the view runs"
    BODY = "the request body: the view checks each name (require)"
    LIST = "the answer's items: the view lists only those allowed (visible)"


@dataclass(frozen=True, slots=True)
class Place:
    """The resource a need is about: its type and where its name comes from."""

    resource_type: ResourceType
    where: Where
    #: the path argument naming the resource (Where.PATH)
    arg: str = ""


@dataclass(frozen=True, slots=True)
class Need:
    """One check: the principal may do the first rule on the resource at ``place`` or
    any other rule -- always on the cluster (CreateTopics' "Create on the cluster")."""

    place: Place
    rules: tuple[Rule, ...]


#: what a view needs: every need must be met
Needs = tuple[Need, ...]
#: nothing: anyone may
OPEN: Needs = ()
THE_CLUSTER = Place(CLUSTER, Where.CLUSTER)


def path(resource_type: ResourceType, arg: str) -> Place:
    return Place(resource_type, Where.PATH, arg)


def body(resource_type: ResourceType) -> Place:
    return Place(resource_type, Where.BODY)


def listed(resource_type: ResourceType) -> Place:
    return Place(resource_type, Where.LIST)


def anywhere(resource_type: ResourceType) -> Place:
    return Place(resource_type, Where.ANY)


def kafka(api: int, *places: Place, operation: AclOperation | None = None, or_cluster: bool = False) -> Needs:
    """What the Kafka API ``api`` needs of the resource at each of ``places`` (the
    cluster if none): its row's rule for that resource type (or the one of
    ``operation``); ``or_cluster``: or its rule on the cluster instead.

    :raise LookupError: the row does not declare it -- the Kafka port would not check it."""
    return tuple(Need(place, (rule(api, place.resource_type, operation), *((rule(api, CLUSTER),) if or_cluster else ())))
                 for place in places or (THE_CLUSTER,))


def own(operation: AclOperation, place: Place = THE_CLUSTER) -> Needs:
    """An act Kafka has no API for: ``operation`` on the resource at ``place``."""
    return (Need(place, (Rule(place.resource_type, operation),)),)


#: a view that names topics lists those Metadata would: Describe on each
TOPICS_NAMED = kafka(ApiKey.METADATA, listed(TOPIC))
#: one that names transactional ids, those DescribeTransactions would (:func:`named_transactions`)
TXNS_NAMED = kafka(ApiKey.DESCRIBE_TRANSACTIONS, listed(TXN))
#: what a view showing a group's detail (:func:`visible_group`) declares: its offsets'
#: topics as OffsetFetch filters them, the transactions they are pending on as named
GROUP_SHOWN = kafka(ApiKey.OFFSET_FETCH, listed(TOPIC)) + TXNS_NAMED


# -- declared where the views are registered ------------------------------------------------

#: each view function's needs (weak: an app's own static view goes with the app)
DECLARED: "weakref.WeakKeyDictionary[Callable[..., Any], Needs]" = weakref.WeakKeyDictionary()


def declare(view: Callable[..., Any], needs: Needs) -> None:
    """Record what ``view`` needs; a view registered at several rules needs the same at each."""
    known = DECLARED.get(view)
    if known is not None and known != needs:
        raise ValueError(f"{view.__name__} is declared with two different needs: {known} and {needs}")
    DECLARED[view] = needs


def requires(needs: Needs) -> Callable[[V], V]:
    """Decorator, under a view's Flask rule: :func:`declare` its needs."""
    def declared(view: V) -> V:
        declare(view, needs)
        return view
    return declared


def needs_of(app: Flask, endpoint: str) -> Needs:
    """What ``endpoint`` of ``app`` needs. :raise KeyError: its view declared nothing."""
    view = app.view_functions[endpoint]
    if view not in DECLARED:
        raise KeyError(f"the view of {endpoint} declares no needs: declare them where it is registered")
    return DECLARED[view]


def _declared(where: Where, resource_type: ResourceType) -> Need:
    """This request's view's need of the resource type at ``where``.

    :raise LookupError: the view checks what it does not declare (a programming error)."""
    for need in needs_of(current_app, request.endpoint or ""):
        if need.place.where is where and need.place.resource_type is resource_type:
            return need
    raise LookupError(f"{request.endpoint} declares no {where.name} need on {resource_type.name}")


# -- the checks -------------------------------------------------------------------------------


def _permitted(engine: "Engine", principal: str, host: str, need: Need, names: list[str],
               audit: bool) -> list[str]:
    """On the loop: the names ``principal`` may act on under ``need``. Its other rules
    (on the cluster) stand for every name and are not audited, as Kafka's CreateTopics
    and ListGroups check them; the first is audited when ``audit``."""
    access = engine.access
    first, *instead = need.rules
    if any(access.authorize(principal, host, r.operation, CLUSTER, CLUSTER_NAME, surface="http", audit=False)
           for r in instead):
        return names
    if need.place.where is Where.ANY:
        if access.authorize_any(principal, host, first.operation, first.resource_type):
            return names
        if audit:
            denied = _denied(need)
            access.authorization_denied(principal, host, denied.operation, denied.resource_type, CLUSTER_NAME,
                                        surface="http")
        return []
    return [name for name in names
            if access.authorize(principal, host, first.operation, first.resource_type, name, surface="http",
                                audit=audit)]


def _denied(need: Need) -> Rule:
    """The rule a refusal names: the need's own, but for any resource of a type, the
    cluster's (what Kafka's InitProducerId answers an idempotent producer it refuses)."""
    return need.rules[-1] if need.place.where is Where.ANY else need.rules[0]


def _allowed(need: Need, names: Iterable[str], audit: bool) -> list[str]:
    """Which of ``names`` this request's principal may act on under ``need``."""
    wanted = list(dict.fromkeys(names))
    engine = current_engine()
    if not engine.access.authorizer_enabled:  # everything is allowed (but what no client sees): no trip to the loop
        return [name for name in wanted if not never_served(need.rules[0].resource_type, name)]
    return engine.call(_permitted, engine, str(request_principal()), request.remote_addr or "", need, wanted,
                       audit)


def _check(need: Need, names: Iterable[str]) -> None:
    """:raise KafkaError: the resource type's authorization error, naming the first of
    ``names`` this request's principal may not act on."""
    wanted = list(dict.fromkeys(names))
    allowed = set(_allowed(need, wanted, audit=True))
    refused = [name for name in wanted if name not in allowed]
    if refused:
        denied = _denied(need)
        raise DENIED[denied.resource_type](f"{request_principal()} may not {denied.operation.name} "
                                           f"{denied.resource_type.name} {refused[0]!r}")


def visible(resource_type: ResourceType, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the view's LIST need lets this request's principal see: a
    list's filter, not logged or counted as a denial (as Kafka's filtered listings)."""
    return set(_allowed(_declared(Where.LIST, resource_type), names, audit=False))


def described_topics(names: Iterable[str]) -> set[str]:
    """Which of the topics ``names`` this request's principal may Describe, whatever the
    view declares: what a part of every page (the header's badge) may name."""
    return set(_allowed(TOPICS_NAMED[0], names, audit=False))


def visible_partitions(rows: list[dict[str, Any]], key: str = "partitions",
                       mark_hidden: bool = False) -> list[dict[str, Any]]:
    """``rows`` (transactions, each with ``key``: partitions by ``topic_name``) with only the
    partitions on topics the view's LIST need of topics lets the principal see, as Kafka's
    DescribeTransactions leaves the others out; ``mark_hidden``: each row says whether it
    had others (``partitions_hidden``), so that a page does not call them "not recorded"."""
    shown = visible(TOPIC, {p["topic_name"] for row in rows for p in row[key]})
    answer = []
    for row in rows:
        kept = [p for p in row[key] if p["topic_name"] in shown]
        answer.append({**row, key: kept, **({"partitions_hidden": len(kept) < len(row[key])} if mark_hidden else {})})
    return answer


def named_transactions(items: list[dict[str, Any]], key: str = "transactional_id") -> list[dict[str, Any]]:
    """``items`` with ``key`` null where it names a transactional id the view's LIST need
    of transactional ids does not let the principal see: Kafka names one only to those
    that may Describe it (DescribeProducers shows a topic's readers producer ids and epochs)."""
    shown = visible(TXN, {item[key] for item in items if item[key]})
    return [item if item[key] in shown or not item[key] else {**item, key: None} for item in items]


#: a group member's lists of partitions (``read_models.group``): a classic member's assignment
#: (None outside the consumer protocol), a consumer group member's own and target
MEMBER_PARTITIONS = ("assignment", "pending_revocation", "target_assignment")


def visible_group(group: dict[str, Any]) -> dict[str, Any]:
    """A group's detail with the offsets (committed, pending, lags) and its members'
    partitions of only the topics the view's LIST need of topics lets the principal see,
    as Kafka's OffsetFetch of all a group's offsets leaves out the topics it may not
    Describe (and ConsumerGroupDescribe refuses such a group whole), and the open
    transactions on them named only as :func:`named_transactions` lets it."""
    members = group["members"]
    shown = visible(TOPIC, {o["topic_name"] for o in group["offsets"]}
                    | {p["topic_name"] for m in members for key in MEMBER_PARTITIONS for p in m.get(key) or ()})
    return {**group,
            "offsets": [{**o, "pending": named_transactions(o["pending"]), "held_by": named_transactions(o["held_by"])}
                        for o in group["offsets"] if o["topic_name"] in shown],
            "members": [{**m, **{key: [p for p in m[key] if p["topic_name"] in shown]
                                 for key in MEMBER_PARTITIONS if m.get(key) is not None}} for m in members]}


def require(resource_type: ResourceType, names: Iterable[str]) -> None:
    """The view's BODY need of the resource type, for each of ``names``.

    :raise KafkaError: the resource type's authorization error, naming the first refused."""
    _check(_declared(Where.BODY, resource_type), names)


def may(operation: str, resource_type: str, name: str) -> bool:
    """Whether this request's principal may do ``operation`` (Kafka's name: ``WRITE``) on
    the resource (``TOPIC``, ``orders``): what a page asks before it offers an action, so
    that a principal is shown only the buttons that would work. Not audited: nothing was
    attempted."""
    engine = current_engine()
    resource, op = ResourceType[resource_type], AclOperation[operation]
    if never_served(resource, name):
        return False
    if not engine.access.authorizer_enabled:
        return True
    return engine.call(lambda: engine.access.authorize(str(request_principal()), request.remote_addr or "", op,
                                                       resource, name, surface="http", audit=False))


def may_open(endpoint: str) -> bool:
    """Whether this request's principal meets ``endpoint``'s needs of the cluster (those
    checked before a view runs): what the console's navigation asks before it links a page."""
    return all(_allowed(need, (CLUSTER_NAME,), audit=False) for need in needs_of(current_app, endpoint)
               if need.place.where is Where.CLUSTER)


def init_app(app: Flask) -> None:
    app.jinja_env.globals["may"] = may
    app.jinja_env.globals["may_open"] = may_open

    @app.before_request
    def _authorize() -> None:
        """After authentication: the needs of the cluster, of any resource and of a
        path argument (an unknown URL has no endpoint: 404)."""
        if request.endpoint is None:
            return
        args = request.view_args or {}
        for need in needs_of(app, request.endpoint):
            if need.place.where in (Where.CLUSTER, Where.ANY):
                _check(need, (CLUSTER_NAME,))
            elif need.place.where is Where.PATH:
                _check(need, (str(args[need.place.arg]),))

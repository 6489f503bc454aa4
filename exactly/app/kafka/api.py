"""The registry of served APIs, and what a handler gets to work with.

Each handler declares beside itself the versions it serves (franz-go's kfake does
the same)::

    @serves(ApiKey.END_TXN, 0, 3)
    async def end_txn(ctx: RequestContext, request) -> dict: ...

and the ApiVersions answer is built from these declarations, so what is advertised
cannot drift from what is implemented. A handler gets the decoded request (a kio
entity of the requested version: fields a version lacks are read with
``getattr(request, name, default)``) and returns the response as a mapping with
kio's field names (``exactly/app/kafka/codec.py`` fits it to the version), or None for a
request that gets no response (Produce with acks=0).

Errors are Kafka's exception classes (``exactly/storage/errors.py``) everywhere below this
package; :func:`error_code` turns one into the wire code, here at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, Protocol

from kio.index import api_key_map

from exactly.app.kafka.wire import ApiKey
from exactly.app.security.principal import KafkaPrincipal
from exactly.storage.errors import (
    FencedLeaderEpochError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownLeaderEpochError,
    UnknownServerError,
)

if TYPE_CHECKING:
    from exactly.app.engine import Engine


#: the leader epoch of every partition: one node, never a new leader
LEADER_EPOCH = 0
#: a handler's answer that closes the connection instead (Kafka's closeConnection)
CLOSE = object()


@dataclass(frozen=True)
class EncodeOffLoop:
    """A handler's answer too large to encode on the loop (a big group's JoinGroup
    leader answer holds every member's metadata: 2,000 members of 20 KB are 40 MB): the
    listener encodes it on a thread, and the loop goes on serving everyone else."""

    response: Mapping[str, Any]


@dataclass(frozen=True)
class Node:
    """This broker as clients see it (Metadata, FindCoordinator, DescribeCluster)."""

    node_id: int
    host: str
    port: int


class ClientConnection(Protocol):
    """What a handler sees of the connection a request came on (the listener's
    ``Connection``), so handlers never depend on the listener."""

    #: the client's address, without the port (a group member's client host)
    host: str
    #: KIP-511: what the client says it is, in its ApiVersions request (v3+)
    software_name: str
    software_version: str
    #: who the client is: ``User:ANONYMOUS`` until a SASL exchange names someone
    principal: KafkaPrincipal
    #: the connection's SASL state on a SASL listener (``exactly/app/kafka/sasl.py``), else None
    sasl: Any


@dataclass(frozen=True)
class RequestContext:
    engine: "Engine"
    node: Node
    connection: ClientConnection
    version: int
    client_id: str | None

    @property
    def principal(self) -> KafkaPrincipal:
        """The principal the request is authorized as (its connection's)."""
        return self.connection.principal


Handler = Callable[[RequestContext, Any], Awaitable["Mapping[str, Any] | EncodeOffLoop | None"]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    #: listed in ApiVersions (WriteTxnMarkers is served only to refuse it, unlisted)
    advertised: bool = True


APIS: dict[int, Api] = {}


def serves(api_key: ApiKey, min_version: int, max_version: int,
           advertised: bool = True) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of ``api_key`` at these versions."""
    def register(handler: Handler) -> Handler:
        if api_key in APIS:
            raise TypeError(f"API {api_key.name} registered twice")
        APIS[api_key] = Api(int(api_key), api_key_map[api_key], min_version, max_version, handler, advertised)
        return handler
    return register


def error_code(error: BaseException | None) -> int:
    """The wire code of an error (NONE for None, UNKNOWN_SERVER_ERROR for a non-Kafka one)."""
    if error is None:
        return 0
    return error.code if isinstance(error, KafkaError) else UnknownServerError.code


def fenced_code(error: BaseException | None, version: int, fenced_since: int | None) -> int:
    """:func:`error_code`, with PRODUCER_FENCED answered as INVALID_PRODUCER_EPOCH to
    request versions older than ``fenced_since`` (None: every version), as Kafka does."""
    code = error_code(error)
    if code == ProducerFencedError.code and (fenced_since is None or version < fenced_since):
        return InvalidProducerEpochError.code
    return code


def abortable_code(code: int, version: int, abortable_since: int) -> int:
    """A wire code with TRANSACTION_ABORTABLE (KIP-890) answered as INVALID_TXN_STATE to
    request versions older than ``abortable_since`` -- the first that knows the error
    (Produce v11, TxnOffsetCommit v4, ...) -- as Kafka's AddPartitionsToTxnManager does
    for such a client's ``DEFAULT_ERROR`` operation."""
    if code == TransactionAbortableError.code and version < abortable_since:
        return InvalidTxnStateError.code
    return code


def check_leader_epoch(current_leader_epoch: int) -> None:
    """Fetch / ListOffsets / OffsetForLeaderEpoch carry the client's idea of the leader
    epoch (-1: unknown, not checked). Ours is always 0, so none is ever older."""
    if current_leader_epoch > LEADER_EPOCH:
        raise UnknownLeaderEpochError(f"leader epoch {current_leader_epoch} is newer than {LEADER_EPOCH}")


#: the errors after which Produce v10+ and Fetch v12+ say who leads the partition now (KIP-951)
LEADER_MOVED = frozenset({NotLeaderOrFollowerError.code, FencedLeaderEpochError.code})
#: KIP-951's "no leader known" (``LeaderIdAndEpoch`` of -1, -1)
NO_LEADER = {"leader_id": -1, "leader_epoch": -1}


def current_leader(ctx: RequestContext, code: int) -> dict:
    """KIP-951's ``CurrentLeader`` of a partition answered with error ``code``: this
    node, at the one leader epoch, when the error says the client's leader is wrong
    (:data:`LEADER_MOVED`: an injected fault's, on one node); else unknown."""
    if code in LEADER_MOVED:
        return {"leader_id": ctx.node.node_id, "leader_epoch": LEADER_EPOCH}
    return NO_LEADER


def node_endpoints(ctx: RequestContext, partitions: Iterable[Mapping[str, Any]]) -> list[dict]:
    """KIP-951's ``NodeEndpoints``: the endpoint of every leader a partition's
    ``current_leader`` names (this node, if any does)."""
    if any(p.get("current_leader", NO_LEADER)["leader_id"] == ctx.node.node_id for p in partitions):
        return [{"node_id": ctx.node.node_id, "host": ctx.node.host, "port": ctx.node.port, "rack": None}]
    return []

"""The Kafka listener: connections, framing, dispatch, responses in order.

It runs on the engine's event loop, so handlers await the engine's operations
directly (no ``engine.call``) and never wait on one another: every request of a
connection becomes a task at once (several in flight -- a producer pipelines up to
five Produce requests, and their appends share one fsync), while the responses go
back strictly in the order the requests came, as Kafka promises. Tasks start in
the order they are created, and a Produce handler appends before it first waits,
so a connection's appends happen in request order too.

Bounded per connection: at most :data:`MAX_IN_FLIGHT` requests are read ahead of
the responses written; past that the connection is not read at all (TCP pushes
back on the client). A client that stops reading its responses therefore stalls
only itself: its responses wait in one socket buffer, nothing more is read from
it, and once it has been silent for ``connections.max.idle.ms`` it is closed.

Bad input closes the connection with one log line naming the client and what was
wrong, as Kafka does: a size over ``socket.request.max.bytes`` (or negative; on a
SASL listener before authentication, over ``sasl.server.max.receive.size``), an
undecodable request, an unknown API key or an unsupported version (except for
ApiVersions, which answers UNSUPPORTED_VERSION in the v0 format so the client can
retry at a version this broker knows). Responses to the requests before the bad
one are still written. Nothing about one connection touches another.

Each listener of ``listeners`` is one :class:`KafkaListener` with its own address,
security protocol and advertised node (Metadata tells a client the listener it came
on). On SSL and SASL_SSL listeners the socket speaks TLS; on SASL_PLAINTEXT and
SASL_SSL ones each connection holds a :class:`~exactly.app.kafka.sasl.SaslSession`, which
decides what is served before authentication, and a SASL request is answered before
the next frame is read (its outcome decides how that frame is read).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any

from exactly.app.kafka import fault_injection as inject
from exactly.app.kafka.api import APIS, CLOSE, Api, ApiKey, EncodeOffLoop, Node, RequestContext, error_code
from exactly.app.kafka.codec import (
    SIZE,
    MalformedRequestError,
    RequestHead,
    decode_request,
    encode_response,
    has_error_code,
    read_head,
)
from exactly.app.kafka.sasl import SASL_APIS, SaslSession, SaslState, raw_token
from exactly.app.listeners import ListenerSpec, SecurityProtocol
from exactly.app.security.principal import ANONYMOUS
from exactly.storage.errors import KafkaError, UnsupportedVersionError
from exactly.storage.record_batch import HEADER, BatchHeader

if TYPE_CHECKING:
    from exactly.app.config import BrokerConfig
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)

#: requests read from one connection ahead of its responses
MAX_IN_FLIGHT = 16
#: bytes a connection's reader buffers before it stops reading the socket (asyncio
#: pauses at twice this); large enough that a 1 MB produce request is not read in
#: dozens of pause/resume rounds
READ_BUFFER_BYTES = 1 << 20
#: a response is handed to the transport in pieces of at most this (:meth:`Connection._write`)
WRITE_SLICE_BYTES = 256 * 1024


class KafkaListener:
    """Serves the Kafka protocol on a bound socket, on the engine's loop."""

    def __init__(self, engine: "Engine", sock: socket.socket, config: "BrokerConfig",
                 spec: ListenerSpec | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.engine = engine
        self._sock = sock
        host, port = sock.getsockname()[:2]
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        #: the entry of ``listeners`` this is (none given: the PLAINTEXT listener of --kafka-port)
        self.spec = spec or ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, host, port)
        if self.spec.protocol.uses_tls and ssl_context is None:
            raise ValueError(f"listener {self.spec.name} ({self.spec.protocol.value}) needs a TLS context")
        self.ssl_context = ssl_context if self.spec.protocol.uses_tls else None
        #: the SASL mechanisms offered (None: not a SASL listener)
        self.sasl_mechanisms = config.enabled_mechanisms() if self.spec.protocol.uses_sasl else None
        advertised = config.advertised_listener(self.spec.name) if config.listeners else config.advertised_listener()
        self.node = Node(engine.topics.node_id, *(advertised or (host, port)))
        engine.kafka_address = (self.node.host, self.node.port)
        self.max_request_bytes = config.socket_request_max_bytes
        self.max_unauthenticated_bytes = min(config.sasl_server_max_receive_size, config.socket_request_max_bytes)
        self.idle_s = config.connections_max_idle_ms / 1000
        #: this listener's open connections (each also in ``engine.clients``)
        self.connections: set[Connection] = set()
        self.max_connections = config.max_connections
        self.max_connections_per_ip = config.max_connections_per_ip
        self.connection_overrides = config.connection_overrides()
        #: IP address -> its connections open now (accepted and not yet ended)
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._server: asyncio.Server | None = None
        self._idle_check: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, sock=self._sock, limit=READ_BUFFER_BYTES,
                                                  ssl=self.ssl_context)
        self._schedule_idle_check()

    def close(self) -> None:
        """:meth:`stop`, from a thread other than the loop's (before the engine closes)."""
        self.engine.call(self.stop)

    def stop_accepting(self) -> None:
        """On the loop: close the listening socket (the listener's own: see exactly/app/server.py)."""
        if self._idle_check is not None:
            self._idle_check.cancel()
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Stop accepting, close every connection (their in-flight requests are cancelled)."""
        self.stop_accepting()
        await asyncio.gather(*(c.abort() for c in list(self.connections)), return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ip = _ip(writer)
        if self._refuse(ip):
            writer.transport.abort()
            return
        self._per_ip[ip] += 1
        try:
            await Connection(self, reader, writer).serve()
        except asyncio.CancelledError:
            pass  # closed by the broker (idle, shutdown, a CLOSE answer): the connection task ends here
        finally:
            self._per_ip[ip] -= 1
            if not self._per_ip[ip]:
                del self._per_ip[ip]

    def _refuse(self, ip: str) -> bool:
        """True (logged, counted) when a new connection from ``ip`` would exceed
        max.connections.per.ip (or its override) or max.connections. Kafka, too, closes
        one over the per-IP limit at once; over max.connections it stops accepting
        until one closes, which here would leave the client waiting unanswered."""
        per_ip = self.connection_overrides.get(ip, self.max_connections_per_ip)
        if self._per_ip[ip] >= per_ip:
            limit, why = "max.connections.per.ip", f"address already has the configured maximum of {per_ip}"
        elif self._per_ip.total() >= self.max_connections:
            limit, why = "max.connections", f"the broker already has the configured maximum of {self.max_connections}"
        else:
            return False
        self.engine.counters.limit_refused(limit)
        log.info("kafka: rejected connection from %s: %s connections (%s)", ip, why, limit)
        return True

    def _schedule_idle_check(self) -> None:
        self._idle_check = asyncio.get_running_loop().call_later(
            min(self.idle_s / 2, 1.0), self._check_idle)

    def _check_idle(self) -> None:
        for connection in list(self.connections):
            connection.close_if_idle(self.idle_s)
        self._schedule_idle_check()


class Connection:
    """One client connection: reads frames, runs handlers, writes responses in order."""

    def __init__(self, listener: KafkaListener, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.listener = listener
        self.engine = listener.engine
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.host, self.address = str(peer[0]), f"{peer[0]}:{peer[1]}"
        self.client_id: str | None = None
        #: KIP-511: what the client says it is, in its ApiVersions request (v3+)
        self.software_name = self.software_version = ""
        #: who the client is; a SASL exchange replaces it (Kafka's ``KafkaPrincipal``)
        self.principal = ANONYMOUS
        #: the SASL authentication on a SASL listener, else None
        self.sasl = None if listener.sasl_mechanisms is None else SaslSession(self.engine, listener.sasl_mechanisms)
        self.since_ms = self.engine.clock.now_ms()
        self.requests = 0
        #: when its last request came, and the transactional id and producer id it last
        #: used (:meth:`_note_producer`): the console tells a live producer from a dead one
        self.last_request_ms = self.since_ms
        self.transactional_id: str | None = None
        self.producer_id = -1
        self._responses: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._handlers: set[asyncio.Task[Any]] = set()
        self._last_active = time.monotonic()
        self._task: asyncio.Task[Any] | None = None
        self._told_stalled = False
        self._faults = self.engine.faults

    def __str__(self) -> str:
        return f"client {self.client_id!r} at {self.address}" if self.client_id is not None else (
            f"client at {self.address}")

    # -- lifecycle ------------------------------------------------------------------------

    async def serve(self) -> None:
        self._task = asyncio.current_task()
        self.listener.connections.add(self)
        self.engine.clients.opened(self)
        writer = asyncio.create_task(self._write_responses())
        try:
            if await self._read_requests():  # a bad request: answer what came before it, then close
                await self._responses.put(None)
                await writer
        except (ConnectionError, OSError):
            pass
        finally:
            writer.cancel()
            for task in self._handlers:
                task.cancel()  # a JoinGroup waiting for a rebalance, a long-polling Fetch
            self._writer.transport.abort()
            self.listener.connections.discard(self)
            self.engine.clients.ended(self)

    async def abort(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def reset(self) -> None:
        """Drop the connection at once, unanswered (a killed broker's connections)."""
        self._writer.transport.abort()

    def close_if_idle(self, idle_s: float) -> None:
        if self._handlers or time.monotonic() - self._last_active < idle_s:
            return  # a request still in progress (a long JoinGroup) is not idleness
        unsent = self._writer.transport.get_write_buffer_size()
        if unsent:
            log.warning("kafka: closing %s: it has not read its responses (%d bytes unsent) for %.0f s "
                        "(connections.max.idle.ms)", self, unsent, idle_s)
        else:
            log.info("kafka: closing %s: idle for %.0f s (connections.max.idle.ms)", self, idle_s)
        if self._task is not None:
            self._task.cancel()

    def _bad(self, what: str) -> None:
        log.warning("kafka: closing %s: %s", self, what)

    # -- reading ----------------------------------------------------------------------------

    async def _read_requests(self) -> bool:
        """Read and dispatch until the client goes (False) or sends something bad (True)."""
        while True:
            try:
                size_bytes = await self._reader.readexactly(SIZE.size)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    self._bad(f"disconnected in the middle of a request size ({len(e.partial)} of 4 bytes)")
                return False
            (size,) = SIZE.unpack(size_bytes)
            most, setting = self._max_frame()
            if not 0 <= size <= most:
                self._bad(f"request size {size} is outside [0, {most}] ({setting})")
                return True
            try:
                frame = await self._reader.readexactly(size)
            except asyncio.IncompleteReadError as e:
                self._bad(f"disconnected in the middle of a request ({len(e.partial)} of {size} bytes)")
                return False
            self._last_active = time.monotonic()
            if self.sasl is not None and self.sasl.state is SaslState.RAW_TOKENS:
                if not await self._raw_token(self.sasl, frame):
                    return True
                continue
            try:
                head = read_head(frame)
                response = self._dispatch(head, frame)
            except MalformedRequestError as e:
                self._bad(str(e))
                return True
            except Exception:  # a bug of ours, not the client's: still only this connection
                log.exception("kafka: closing %s: its request could not be dispatched", self)
                return True
            if self._responses.full():
                self._note_stall()
            await self._responses.put(response)
            if self.sasl is not None and head.api_key in SASL_APIS:
                await asyncio.wait([response])
                if self.sasl.state is SaslState.FAILED:
                    return True  # its answer is written, then the connection closes

    def _max_frame(self) -> tuple[int, str]:
        """The largest frame this connection may send now, and the setting that says so:
        before its SASL authentication (or during a re-authentication) Kafka's
        ``sasl.server.max.receive.size``, checked on reading the size, so an
        unauthenticated client makes the broker buffer no more than that."""
        if self.sasl is not None and self.sasl.state is not SaslState.AUTHENTICATED:
            return self.listener.max_unauthenticated_bytes, "sasl.server.max.receive.size, before authentication"
        return self.listener.max_request_bytes, "socket.request.max.bytes"

    async def _raw_token(self, session: SaslSession, token: bytes) -> bool:
        """Answer a raw SASL token (after SaslHandshake v0) in the same framing, after
        the responses before it; False when the login failed and the connection closes."""
        answer = await raw_token(session, token, self)
        if answer is None:
            return False
        await self._responses.put(_done(SIZE.pack(len(answer)) + answer))
        return True

    def _dispatch(self, head: RequestHead, frame: bytes) -> asyncio.Future[Any]:
        """Start handling one request; returns what the writer awaits for its response."""
        api = APIS.get(head.api_key)
        if api is None:
            raise MalformedRequestError(f"unknown API key {head.api_key} (correlation id {head.correlation_id})")
        if not api.min_version <= head.api_version <= api.max_version:
            if head.api_key == ApiKey.API_VERSIONS:
                return _done(_api_versions_fallback(head))
            raise MalformedRequestError(
                f"{api.name} v{head.api_version} is not supported (v{api.min_version}-v{api.max_version})")
        refusal = None if self.sasl is None else self.sasl.refusal(head.api_key)
        if refusal is not None:
            raise MalformedRequestError(refusal)
        client_id, body = decode_request(frame, head)
        if client_id is not None:
            self.client_id = client_id
        self.requests += 1
        self.last_request_ms = self.engine.clock.now_ms()
        task = asyncio.get_running_loop().create_task(self._handle(api, head, client_id, body))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        return task

    def _note_stall(self) -> None:
        if not self._told_stalled and self._writer.transport.get_write_buffer_size():
            self._told_stalled = True
            log.warning("kafka: %s is not reading its responses (%d bytes unsent); reading no more of "
                        "its requests until it does", self, self._writer.transport.get_write_buffer_size())

    # -- handling ---------------------------------------------------------------------------

    async def _handle(self, api: Api, head: RequestHead, client_id: str | None, body: Any) -> Any:
        ctx = RequestContext(self.engine, self.listener.node, self, head.api_version, client_id)
        started = time.perf_counter()
        try:
            if self._faults.installed:  # the one check a request pays while no fault is installed
                response = await inject.handle(self._faults, head.api_key, api.handler, ctx, body)
            else:
                response = await api.handler(ctx, body)
            self._note_producer(head.api_key, body, response)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            response = self._error_response(api, head, e)
        try:
            if response is None or response is CLOSE:
                return response
            if isinstance(response, EncodeOffLoop):
                return await asyncio.to_thread(encode_response, head.api_key, head.api_version, head.correlation_id,
                                               response.response)
            return encode_response(head.api_key, head.api_version, head.correlation_id, response)
        except Exception:
            log.exception("kafka: cannot encode the %s v%d response to %s", api.name, head.api_version, self)
            return CLOSE
        finally:
            self.engine.counters.observe_kafka_request(api.name, time.perf_counter() - started)

    def _note_producer(self, api_key: int, body: Any, response: Any) -> None:
        """Remember the transactional id and producer id a request used: InitProducerId
        (the id it was given), Produce (its transactional id, the producer id of its
        first batch), and the transaction requests (v3 and below of AddPartitionsToTxn:
        clients send those; v4+ is the brokers' batched verification)."""
        if api_key == ApiKey.INIT_PRODUCER_ID:
            txn_id, producer_id = body.transactional_id, response.get("producer_id", -1)
        elif api_key == ApiKey.PRODUCE:
            records = next((d.records for t in body.topic_data for d in t.partition_data if d.records), b"")
            txn_id = body.transactional_id
            producer_id = BatchHeader(*HEADER.unpack_from(records)).producer_id if len(records) >= HEADER.size else -1
        elif api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            if not hasattr(body, "v3_and_below_transactional_id"):
                return  # v4+: a broker's, for several transactions
            txn_id, producer_id = body.v3_and_below_transactional_id, body.v3_and_below_producer_id
        elif api_key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT):
            txn_id, producer_id = body.transactional_id, body.producer_id
        else:
            return
        if txn_id:
            self.transactional_id = txn_id
        if producer_id is not None and producer_id >= 0:
            self.producer_id = producer_id

    def _error_response(self, api: Api, head: RequestHead, error: Exception) -> Any:
        """A request that failed as a whole: its error code in the response's top-level
        ``error_code``, or -- for a response without one -- the connection closed."""
        if not isinstance(error, KafkaError):
            log.error("kafka: %s v%d from %s failed", api.name, head.api_version, self, exc_info=error)
        if has_error_code(head.api_key, head.api_version):
            return {"error_code": error_code(error)}
        if isinstance(error, KafkaError):
            log.warning("kafka: %s v%d from %s failed: %s: %s", api.name, head.api_version, self,
                        error.name, error)
        return CLOSE

    # -- writing ----------------------------------------------------------------------------

    async def _write(self, frame: bytes) -> None:
        """Write one response, a slice at a time: the transport keeps what the socket
        has not taken in one buffer, which it copies on every partial send -- a 40 MB
        response handed over whole cost the loop seconds of copying while a slow client
        read it."""
        for piece in _slices(frame):
            self._writer.write(piece)
            if self._responses.full():  # the reader may have checked before the buffer filled
                self._note_stall()
            await self._writer.drain()

    async def _write_responses(self) -> None:
        """Write each response when its turn comes; stop at the end mark or a CLOSE."""
        try:
            while (pending := await self._responses.get()) is not None:
                frame = await pending
                if frame is CLOSE:
                    break
                if frame is not None:
                    await self._write(frame)
                    self._last_active = time.monotonic()
        except (ConnectionError, OSError):
            pass
        finally:
            if self._task is not None and not self._task.done():
                self._task.cancel()


def _slices(frame: bytes) -> list[memoryview]:
    """``frame`` in pieces of at most :data:`WRITE_SLICE_BYTES` (views, not copies)."""
    view = memoryview(frame)
    return [view[i:i + WRITE_SLICE_BYTES] for i in range(0, len(frame), WRITE_SLICE_BYTES)] or [view]


def _ip(writer: asyncio.StreamWriter) -> str:
    """The IP address of a connection's peer, as ``ipaddress`` writes it."""
    peer = writer.get_extra_info("peername") or ("?",)
    try:
        return str(ipaddress.ip_address(peer[0]))
    except ValueError:
        return str(peer[0])


def _done(result: Any) -> asyncio.Future[Any]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


def _api_versions_fallback(head: RequestHead) -> bytes:
    """ApiVersions at a version this broker does not know: UNSUPPORTED_VERSION in the v0
    format (header v0), listing ApiVersions' own range, so the client retries lower."""
    api = APIS[ApiKey.API_VERSIONS]
    return encode_response(ApiKey.API_VERSIONS, 0, head.correlation_id, {
        "error_code": UnsupportedVersionError.code,
        "api_keys": [{"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}]})

"""``Server``: a :class:`~exactly.app.broker.Broker` with its Kafka and HTTP listeners -- the one
way listeners are started (``exactly serve``, the pytest plugin, ``exactly.app.testing.broker()``).

::

    with Server(tmp_path / "data") as server:      # free ports on 127.0.0.1
        server.bootstrap, server.http_url           # "127.0.0.1:40811", "http://127.0.0.1:40812"
        server.restart(clean=False)                 # as a SIGKILL and a new start would
        server.audit("billing", "orders", "payments").ok   # was it exactly once?

The ports are bound once, when the server is made, and held until :meth:`close`: a
restart in place stops the broker and its listeners and starts them again on the same
data directory and the same listening sockets, so a client's next connection attempt
reaches the new broker (connections that arrive meanwhile wait in the listen backlog).
The listeners serve duplicates of those sockets, which each stop closes.

A clean restart is ``exactly serve``'s shutdown and start. An unclean one is
:meth:`Engine.kill <exactly.app.engine.engine.Engine.kill>`: in-process, and honest about what
a SIGKILL leaves, because the logs are written with ``os.write`` -- whatever was
written is in the page cache and survives a kill, fsynced or not, and whatever a kill
skips (the final fsync, the producer snapshots, the checkpoints, the clean-shutdown
marker, the completion of prepared transactions, the mirror's last round) the kill
skips too; the next start recovers. A child process killed for real would cost a new
interpreter's start (about a second) per restart and hide the broker from the test.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

from exactly.app import open_files
from exactly.app.broker import Broker
from exactly.app.config import BrokerConfig
from exactly.app.engine.audit import AuditView
from exactly.app.listeners import ListenerSpec, bind

log = logging.getLogger(__name__)


class Server:
    """A broker on ``data_dir`` served on ``host``: Kafka on ``kafka_port`` (or on each of
    the ``listeners`` config's entries), the HTTP API and console on ``http_port`` (0: a
    free port). ``config``: Kafka's config names."""

    def __init__(self, data_dir: str | Path, *, host: str = "127.0.0.1", kafka_port: int = 0,
                 http_port: int = 0, **config: Any) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.config = config
        #: completed restarts (the HTTP API's ``server`` resource shows it)
        self.restarts = 0
        self._lock = threading.Lock()
        self._faults: Any = None
        self._sockets: list[socket.socket] = []
        try:  # raises PortInUseError (or a bad listeners config) before anything else happens
            broker_config = BrokerConfig.from_kafka(config)
            self.specs: list[ListenerSpec] = broker_config.listener_specs(host, kafka_port)
            open_files.raise_limit(broker_config)
            for spec in self.specs:
                self._sockets.append(bind(spec.host, spec.port,
                                          "Kafka" if len(self.specs) == 1 else f"Kafka {spec.name}"))
            self._sockets.append(bind(host, http_port, "HTTP"))
            self._start()
        except BaseException:
            _close(self._sockets)
            raise

    # -- addresses ----------------------------------------------------------------------

    @property
    def kafka_port(self) -> int:
        """The port of the first Kafka listener."""
        return self._sockets[0].getsockname()[1]

    @property
    def http_port(self) -> int:
        return self._sockets[-1].getsockname()[1]

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the first Kafka listener, for ``bootstrap.servers``."""
        return f"{_url_host(self.specs[0].host)}:{self.kafka_port}"

    @property
    def kafka(self) -> Any:
        """The first Kafka listener (:attr:`kafka_listeners` has each)."""
        return self.kafka_listeners[0]

    @property
    def http_url(self) -> str:
        """The base URL of the HTTP API and the console."""
        return f"http://{_url_host(self.host)}:{self.http_port}"

    @property
    def engine(self) -> Any:
        return self.broker.engine

    @property
    def faults(self) -> Any:
        """The faults installed on purpose (``Broker.faults``); they survive restarts."""
        return self.broker.faults

    @property
    def cluster_id(self) -> str:
        return self.broker.cluster_id

    # -- lifecycle ----------------------------------------------------------------------

    def _start(self) -> None:
        """Open the broker (recovering the directory) and attach the listeners."""
        from exactly.app.http import HttpSettings, create_app
        from exactly.app.http.auth import LOOPBACK_HOSTS
        from exactly.app.http.server import HttpServer
        from exactly.app.kafka import attach
        from exactly.app.security.tls import server_context

        self.broker = Broker(self.data_dir, **self.config)
        if self._faults is not None:  # a restart: the faults installed stay installed
            self.broker.engine.faults = self._faults
        self._faults = self.broker.engine.faults
        self._http_stoppers: list[Callable[[], None]] = []
        self.kafka_listeners: list[Any] = []
        try:
            config = self.broker.config
            tls = (server_context(config, self.data_dir)
                   if any(spec.protocol.uses_tls for spec in self.specs) else None)
            loopback = ipaddress.ip_address(socket.gethostbyname(self.host)).is_loopback
            settings = HttpSettings(token=config.http_auth_token, token_principal=config.http_auth_token_principal,
                                    allowed_hosts=LOOPBACK_HOSTS | {self.host} if loopback else None)
            web = create_app(self.broker.engine, settings, mirror=self.broker.mirror)
            web.extensions["exactly.server"] = self
            self._http_stoppers.append(web.extensions["exactly.history"].stop)
            self._http_stoppers.append(HttpServer(web, self._sockets[-1].dup(), config=config).start().close)
            for spec, sock in zip(self.specs, self._sockets):
                self.kafka_listeners.append(attach(self.broker.engine, sock.dup(), spec, tls))
        except BaseException:
            self._stop_kafka()
            self._stop_http()
            self.broker.close()
            raise

    def _stop_kafka(self) -> None:
        for listener in self.kafka_listeners:
            listener.close()
        self.kafka_listeners = []

    def _stop_http(self) -> None:
        for stop in reversed(self._http_stoppers):
            stop()
        self._http_stoppers = []

    def _stop(self, clean: bool) -> bool:
        """Stop the listeners and the broker: cleanly (listeners first, as ``exactly serve``
        does), or as a kill leaves them: at once, the HTTP server's threads after."""
        if clean:
            self._stop_kafka()
            self._stop_http()
            return self.broker.close()
        for listener in self.kafka_listeners:
            self.engine.call(listener.stop_accepting)
        self.broker.kill()
        self._stop_http()
        return False

    def restart(self, clean: bool = True) -> None:
        """Stop and start again on the same directory and ports: ``clean`` as ``exactly
        serve`` shuts down, else as a SIGKILL would leave it (see the module docstring)."""
        with self._lock:
            if not self._sockets:  # closed meanwhile (a restart asked for over HTTP, then close)
                return
            self._stop(clean)
            self._start()
            self.restarts += 1
        log.info("restarted %s in place (%s) on Kafka %s and %s", self.data_dir,
                 "cleanly" if clean else "uncleanly", self.bootstrap, self.http_url)

    def restart_later(self, clean: bool = True) -> None:
        """:meth:`restart` on a thread of its own: for a request served by this server,
        whose listener the restart stops (it waits for that request to finish)."""
        threading.Thread(target=self.restart, args=(clean,), name="exactly-restart", daemon=True).start()

    def close(self) -> bool:
        """Stop cleanly and release the ports; returns whether the broker closed cleanly."""
        with self._lock:
            if not self._sockets:
                return True
            try:
                return self._stop(clean=True)
            finally:
                _close(self._sockets)
                self._sockets = []

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- events on demand ----------------------------------------------------------------

    def fence(self, transactional_id: str, actor: str = "a test") -> tuple[int, int]:
        """Fence ``transactional_id``'s producer now, as a new instance's InitProducerId
        would; returns the new producer id and epoch."""
        return self.engine.call(self.engine.transactions.fence_producer, transactional_id, actor)

    def timeout(self, transactional_id: str, actor: str = "a test") -> None:
        """Time ``transactional_id``'s open transaction out now, as its timeout would."""
        self.engine.call(self.engine.transactions.time_out_transaction, transactional_id, actor)

    def audit(self, group_id: str, input_topic: str, output_topic: str, records_per_input: int | None = None,
              until: Mapping[int, int] | None = None) -> AuditView:
        """Did ``group_id`` turn ``input_topic`` into ``output_topic`` exactly once, up to
        each input partition's high watermark (or ``until``'s offset for it)?
        (:meth:`Engine.audit <exactly.app.engine.engine.Engine.audit>`: from the test's
        thread, never the loop's). A test that ends with ``assert view.ok`` fails when the
        application stopped before the end of its input."""
        return self.engine.audit(group_id, input_topic, output_topic, records_per_input, until)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _close(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()

"""A broker per test: the ``exactly_broker`` fixture of the pytest plugin
(``exactly/app/testing/pytest_plugin.py``, registered by the package's ``pytest11`` entry
point) and, outside pytest, :func:`broker`::

    from exactly.app.testing import broker

    with broker() as b:                       # a fresh directory, free 127.0.0.1 ports
        producer = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "t"})
        ...
        b.fence("t")                          # as a new instance's InitProducerId would
        b.timeout("t")                        # as transaction.timeout.ms expiring would
        b.restart(clean=False)                # as a SIGKILL and a new start; same ports
        requests.get(b.http_url + "/v3/clusters")

Each is an :class:`exactly.app.server.Server`: ``.bootstrap``, ``.http_url``, ``.broker``,
``.engine``, ``.restart``, ``.fence``, ``.timeout``, ``.faults``, ``.audit``. Everything
is released on the way out, whatever the test did: the listeners, the ports, the
broker's threads and files, and the temporary directory.

:func:`lineage` is the header with which an application's output records name their
input records (``exactly/app/lineage.py``), so the audit checks each input record::

    producer.produce("payments", value, headers=[lineage(message)])   # confluent-kafka
    producer.send("payments", value, headers=[lineage(record)])       # the embedded producer
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from exactly.app.lineage import lineage

if TYPE_CHECKING:
    from exactly.app.server import Server

#: a test broker's defaults: one partition per internal topic (Kafka's 50 spread a
#: cluster's load; here each would cost files and start time, and spread nothing)
TEST_CONFIG = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1}


@contextmanager
def broker(data_dir: str | Path | None = None, **config: Any) -> Iterator["Server"]:
    """A :class:`~exactly.app.server.Server` on free 127.0.0.1 ports, on ``data_dir`` (default: a
    temporary directory, removed afterwards), with :data:`TEST_CONFIG` and ``config``
    (Kafka's names: ``broker(**{"log.segment.bytes": 1 << 20})``)."""
    from exactly.app.server import Server  # here: importing the plugin must cost a pytest run nothing

    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="exactly-"))) / "data"
        yield stack.enter_context(Server(data_dir, **{**TEST_CONFIG, **config}))


__all__ = ["TEST_CONFIG", "broker", "lineage"]

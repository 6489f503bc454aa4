"""The engine: the one owner of broker state, living on one asyncio event loop, and the
services Kafka's request handlers call.

Partitions, producer state and the transaction and group coordinators are touched
only by code running on the engine's loop, so there are no locks around them. The
Kafka listener runs on the same loop and calls the services directly; HTTP worker
threads, scheduled jobs and the embedded client hand them work through the loop bridge
(``engine.call(engine.transactions.end_txn, ...)``, ``loop_bridge.py``) and wait for the
answer. The services, one module each, are Kafka's:

* ``partitions`` (``partitions.py``, Kafka's ReplicaManager): produce, fetch, list
  offsets, delete records, the log directory, the coordinators' markers;
* ``topics`` (``topics.py``, the controller and metadata cache): create, grow,
  configure, delete and describe topics;
* ``transactions`` and ``groups`` (``transactions.py``, ``groups.py``): the two
  coordinators behind interfaces of their own;
* ``access`` (``access.py``): the authorizer, the users' credentials, per-principal limits;
* ``jobs`` (``jobs.py``): the periodic work.

The loop never waits on the disk: fsyncs of appends run on the fsync thread through
group commit (``exactly/app/engine/group_commit.py``); snapshots, checkpoints,
retention, cleaning, topic changes and producer-id blocks are planned on the loop,
written on a maintenance thread and installed on the loop
(``exactly/app/engine/maintenance.py``). Only opening and closing the data directory
touch the disk from the caller's thread, while the loop is not running.

The internal topics ``__transaction_state`` and ``__consumer_offsets`` are created
when first needed (as Kafka does), compacted, and read back into the coordinators
when the engine starts; prepared transactions are then rolled forward. The ACLs,
credentials and feature levels of ``__cluster_metadata`` are read back the same way
(``exactly/coordinator/cluster_metadata.py``); their changes are durable before they apply.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any, Mapping

from exactly.app.config import BrokerConfig
from exactly.app.engine import audit as exactly_once
from exactly.app.engine.access import Access
from exactly.app.engine.clients import ConnectedClients
from exactly.app.engine.coordinator_io import EngineCoordinatorIO
from exactly.app.engine.counters import EngineCounters
from exactly.app.engine.disk_space import DiskSpace
from exactly.app.engine.feature_levels import FeatureLevels
from exactly.app.engine.groups import Groups
from exactly.app.engine.jobs import Jobs
from exactly.app.engine.loop_bridge import LoopBridge
from exactly.app.engine.maintenance import Maintenance
from exactly.app.engine.partitions import Partitions
from exactly.app.engine.topics import Topics
from exactly.app.engine.transactions import Transactions
from exactly.app.engine.worker import Worker
from exactly.app.faults.fault import Faults
from exactly.coordinator import cluster_metadata, offsets_log, transaction_log
from exactly.coordinator.group_coordinator import GroupCoordinator
from exactly.coordinator.transaction_coordinator import TransactionCoordinator
from exactly.storage.clock import Clock, SystemClock
from exactly.storage.log_manager import LogManager
from exactly.storage.record_batch import Record, SimpleRecord, decode_batch, encode_batch

#: how often the group coordinator checks session and rebalance timeouts
GROUP_TICK_S = 0.1

log = logging.getLogger(__name__)


class Engine:
    """Broker state, the loop that owns it, and the services over it."""

    def __init__(self, data_dir: Path | str, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self._logs = LogManager(data_dir, config.log, self.clock)  # recovers before anything runs
        #: whether writes are refused for lack of space (one log line each way)
        self.disk = DiskSpace(self._logs.data_dir)
        self._loop = asyncio.new_event_loop()
        self._bridge = LoopBridge(self._loop)
        #: work handed to the loop from other threads (``loop_bridge.py``)
        self.call = self._bridge.call
        self.submit = self._bridge.submit
        self.schedule = self._bridge.schedule
        self._fsync = Worker(self._loop, "exactly-fsync")
        #: snapshots, checkpoints, retention, cleaning, topic changes, producer-id blocks
        self.maintenance = Maintenance(self._loop, self.disk)
        self._logs.background = self.maintenance.start  # the snapshot of a roll
        self.counters = EngineCounters()
        #: the Kafka clients connected now (``exactly/app/kafka/`` tells it; read models list them)
        self.clients = ConnectedClients()
        #: the faults installed on purpose (``exactly/app/faults/``): the listener checks it, every face changes it
        self.faults = Faults()
        #: ``(host, port)`` clients are told to connect to, once a Kafka listener serves
        #: (``exactly/app/kafka/server.py``); None without one (an embedded Broker)
        self.kafka_address: tuple[str, int] | None = None
        io = EngineCoordinatorIO(self)
        max_seen_coordinator_epoch = max(
            (entry.coordinator_epoch for log_ in self._logs for entry in log_.producer_state), default=-1)
        self._transaction_coordinator = TransactionCoordinator(Path(data_dir), config, io, self.clock,
                                                              self.counters, max_seen_coordinator_epoch)
        self._group_coordinator = GroupCoordinator(config, io, self.clock)
        self.access = Access(config, self.counters, self._bridge, self._append_cluster_metadata,
                             lambda transactional_id: self.transactions.is_open(transactional_id))
        self.jobs = Jobs(self._logs, self.maintenance, self.clock, config, self._transaction_coordinator)
        self.partitions = Partitions(self._logs, self._loop, self._fsync, self.counters, self.disk, self.maintenance,
                                     self.jobs, self.access, self._transaction_coordinator, self._group_coordinator)
        self.topics = Topics(self._logs, config, self.counters, self.maintenance, self.partitions,
                             self._group_coordinator)
        self.transactions = Transactions(self._transaction_coordinator, self._group_coordinator, self.access,
                                         self.partitions)
        self.groups = Groups(self._group_coordinator)
        #: the finalized feature levels (KIP-584), ``transaction.version`` among them
        self.features = FeatureLevels(config.transaction_version, self.clock, self._append_cluster_metadata)
        self._load_coordinators()
        self._thread = threading.Thread(target=self._run_loop, name="exactly-engine", daemon=True)
        self._closed = False
        self._closed_clean = False
        self._thread.start()
        self._loop.call_soon_threadsafe(self._started)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    # -- coordinators ---------------------------------------------------------------------

    def _load_coordinators(self) -> None:
        """Materialise both coordinators from their logs (before the loop runs). Producer
        ids are allocated from the ``producer-id-block`` file and the transaction log;
        only when that file is lost do the partitions' producer ids witness the ids
        idempotent producers were given (``exactly/coordinator/producer_id_manager.py``)."""
        producer_ids = self._transaction_coordinator.producer_ids
        if not producer_ids.from_file:
            producer_ids.raise_floor(1 + max(
                (pid for log_ in self._logs for pid in log_.producer_state.producers), default=-1))
        for (topic, partition), log_ in sorted(self._logs.logs.items()):
            if topic == transaction_log.TOPIC:
                self._transaction_coordinator.load_records(partition, (
                    (record.offset, record.key, record.value, record.headers)
                    for _, batch in log_.batches() for record in _data_records(batch)))
            elif topic == offsets_log.TOPIC:
                for _, batch in log_.batches():
                    self._group_coordinator.load_batch(partition, batch)
            elif topic == cluster_metadata.TOPIC:
                image = cluster_metadata.replay(
                    (r.key, r.value) for _, batch in log_.batches() for r in _data_records(batch))
                self.access.load(image)
                self.features.load(image)

    def _started(self) -> None:
        self._transaction_coordinator.resume()
        self._tick_groups()

    def _tick_groups(self) -> None:
        if not self._closed:
            self._group_coordinator.tick()
            # at the next group deadline if it comes before the next tick: a session
            # expires when it is due, not up to a tick late
            due = self._group_coordinator.next_deadline_ms()
            delay = GROUP_TICK_S if due is None else min(GROUP_TICK_S, max(due - self.clock.now_ms(), 0) / 1000)
            self._loop.call_later(delay, self._tick_groups)

    async def _append_cluster_metadata(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ACL, credential or feature records to ``__cluster_metadata`` in one batch, durably."""
        if not records:
            return
        await self.topics.ensure_internal_topic(cluster_metadata.TOPIC)
        now = self.clock.now_ms()
        batch = encode_batch([SimpleRecord(value, key=key, timestamp=now) for key, value in records])
        await self.partitions.append_internal(cluster_metadata.TOPIC, 0, batch)

    def audit(self, group_id: str, input_topic: str, output_topic: str, records_per_input: int | None = None,
              until: Mapping[int, int] | None = None) -> exactly_once.AuditView:
        """The exactly-once audit of a consume-transform-produce group (``exactly/app/engine/audit.py``),
        of each input partition up to its high watermark or ``until``'s offset for it.
        Call it from any thread but the loop's: it reads the logs' files on the caller's thread."""
        return exactly_once.audit(self, group_id, input_topic, output_topic, records_per_input, until)

    # -- lifecycle ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        await self._transaction_coordinator.wait_for_completions()
        await self.maintenance.close()
        await self.partitions.drain()

    def close(self) -> bool:
        """Finish in-flight fsyncs and maintenance, then -- with the loop stopped, on
        the calling thread -- snapshot and flush every log and release the directory.
        The directory is released whatever fails (a full disk, an offline log); returns
        whether the close was clean (if not, the next start recovers the logs)."""
        if self._closed:
            return self._closed_clean
        clean = False
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
            clean = True
        finally:
            self._closed = self._bridge.closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self.maintenance.stop()
            self._fsync.stop()
            self._closed_clean = self._logs.close(clean=clean)
            self._loop.close()
        return self._closed_clean

    def kill(self) -> None:
        """Stop as SIGKILL would leave the data directory (an unclean restart in place,
        ``exactly/app/server.py``). At one instant on the loop every Kafka connection is reset
        and every task cancelled; from then on no task takes another step of work. None
        of what :meth:`close` does is done: no transaction is completed, no final fsync
        (what was written is in the page cache, which a kill does not empty either), no
        producer snapshot, no checkpoint, no clean-shutdown marker -- so the next open
        recovers each log from its recovery point and rolls prepared transactions
        forward. Afterwards the loop runs only to deliver the cancellations, and the
        descriptors and the directory lock are released, as the kernel releases them
        (an index entry still buffered is written out then, where a kill would lose it:
        the indexes are sparse and derived, so that only shortens a later scan)."""
        if self._closed:
            return
        self._loop.call_soon_threadsafe(self._kill_now)
        self._thread.join()
        for _ in range(_KILL_DRAIN_ROUNDS):  # each round: cancel, then one pass of the loop
            pending = [task for task in asyncio.all_tasks(self._loop) if not task.done()]
            for task in pending:
                task.cancel()
            self._loop.call_soon(self._loop.stop)
            self._loop.run_forever()
            if not pending:
                break
        self.maintenance.stop()
        self._fsync.stop()
        self._logs.close(clean=False)
        self._loop.close()

    def _kill_now(self) -> None:
        """On the loop: the instant of the kill (see :meth:`kill`)."""
        self._closed = self._bridge.closed = self._bridge.killed = True
        self.clients.reset_all()
        self.partitions.stop_commits()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.stop()


#: passes of the killed loop that deliver cancellations (a cancelled task's cleanup may
#: cancel another; a few passes settle them all)
_KILL_DRAIN_ROUNDS = 20


def _data_records(batch: bytes) -> tuple[Record, ...]:
    """The records of a data batch (control batches have none a coordinator loads)."""
    decoded = decode_batch(batch)
    return () if decoded.header.is_control else decoded.records

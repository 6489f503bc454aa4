"""The ``exactly`` sink: batch and streaming writes of a DataFrame to Kafka topics,
exactly once, with broker-side two-phase commit (KIP-939).

Input columns are those of Spark's Kafka sink: ``value`` (string or binary,
required), ``key``, ``topic`` (the option ``topic`` wins over it), ``partition``
(default: murmur2 of the key, round robin without one) and ``headers``
(array<struct<key: string, value: binary>>).

How a write commits (docs/spark.md's "Writing topics from Spark, exactly once" tells why):

1. Each task writes its rows in one transaction under the transactional id
   ``exactly-spark-<sink>-<run>-<batch parity>-<task partition>`` -- sink: the
   streaming query id (stable across restarts) or a batch job's uuid; run: the query
   run id, new on every start; parity: the micro-batch id mod 2 -- initialised with
   enable2Pc (so it never times out, and a retried attempt of the task, which uses
   the same id, fences and aborts the failed one), and leaves it open (prepared). It
   reports ``(transactional id, producer id, epoch)``.
2. The driver-side ``commit`` settles what earlier runs left (below), checks that
   every reported transaction is still the id's Ongoing one (keepPreparedTxn answers
   the pair it was written with, and fences that writer: the driver is given the
   epoch bumped, KIP-939), then makes the decision durable: the batch id, with the
   run as metadata, committed as the offset of the group
   ``exactly-spark-sink-<query id>`` on :data:`SINK_COMMITS_TOPIC`. Then it commits
   each transaction (EndTxn, with the pair keepPreparedTxn gave it).
3. Settling, at the start of every streaming commit and abort: the transactions of
   the latest decided batch that are still Ongoing are committed (the driver died
   after deciding); every other Ongoing transaction of the sink -- a failed
   attempt's, a crashed run's, an undecided batch's -- is aborted. A micro-batch
   replayed after its decision (same batch id, new run) has its new transactions
   aborted. Only the ids of one (run, parity) can hold the decided batch: the next
   batch of a run uses the other parity, and the one after that starts only when
   this batch's commit has returned.

The stream writer is a new instance for each commit/abort call and every method
runs in some Python worker, so nothing is kept between calls but the process's
clients (:func:`client_for`, :func:`exactly.app.spark.kafka_admin.admin_for`).

Test hook (the only one): ``EXACTLY_SPARK_CRASH_AT=<point>[:batch]``, the point
``before-decision``, ``after-decision`` or ``mid-completion`` (between the first and
second EndTxn), makes a streaming commit SIGKILL the driver's processes there
(:func:`crash_point`; in-process tests replace that function).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from exactly.app.client.partitioner import partition_for_key
from exactly.app.spark.kafka_admin import KafkaAdmin, admin_for
from exactly.app.spark.kafka_client import KafkaClient, TransactionalProducer
from exactly.storage.record_batch import SimpleRecord

if TYPE_CHECKING:
    from pyspark import TaskContext

#: the topic whose (per-sink group) committed offset is a streaming sink's last decided batch
SINK_COMMITS_TOPIC = "exactly-spark-sink-commits"
#: prefix of every transactional id and group the sink uses
PREFIX = "exactly-spark-"
CRASH_AT_ENV = "EXACTLY_SPARK_CRASH_AT"
ONGOING = "Ongoing"


class WriteAbandoned(Exception):
    """A batch write task finished after its job was aborted."""


class PreparedTransactionLost(Exception):
    """A task's transaction is no longer the open one of its id (fenced by another
    attempt, or aborted): the batch cannot commit and will be written again."""


@dataclass(frozen=True)
class TaskCommit(WriterCommitMessage):
    """What a task prepared: complete ``transactional_id``'s Ongoing transaction iff it
    was written by ``producer_id``/``producer_epoch`` (-1: the task wrote nothing);
    ``ids`` names the sink and run it belongs to."""

    ids: "TxnIds"
    transactional_id: str
    producer_id: int
    producer_epoch: int
    records: int


@dataclass(frozen=True)
class TxnIds:
    """The transactional ids of one sink and run."""

    sink: str
    run: str

    def task(self, batch: int, partition: int) -> str:
        return f"{PREFIX}{self.sink}-{self.run}-{batch % 2}-{partition}"

    @staticmethod
    def of_sink(sink: str) -> str:
        """A pattern every id of ``sink`` fully matches (ListTransactions v2)."""
        return f"{re.escape(PREFIX + sink)}-.*"

    def of_batch(self, batch: int) -> re.Pattern:
        return re.compile(f"{re.escape(PREFIX + self.sink + '-' + self.run)}-{batch % 2}-[0-9]+")


# -- connections ---------------------------------------------------------------------

_clients: dict[str, KafkaClient] = {}


def client_for(bootstrap: str) -> KafkaClient:
    """This worker process's client of ``bootstrap`` (Spark reuses Python workers, so
    connections and coordinator lookups outlive one task or commit)."""
    if bootstrap not in _clients:
        _clients[bootstrap] = KafkaClient(bootstrap)
    return _clients[bootstrap]


def bootstrap_of(options: dict) -> str:
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("the exactly sink needs the option kafka.bootstrap.servers")
    return bootstrap


# -- the task side ----------------------------------------------------------------------


def check_schema(schema: StructType, options: Mapping[str, str]) -> None:
    """Spark's Kafka sink's rules: a string or binary ``value``; a topic column or option."""
    fields = {f.name: f.dataType for f in schema.fields}
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(f"the {name} column must be string or binary, not {fields[name].simpleString()}")
    if "value" not in fields:
        raise ValueError("the exactly sink needs a value column (string or binary)")
    if "topic" not in fields and not options.get("topic"):
        raise ValueError("no topic: set the option topic or give the DataFrame a topic column")


def write_rows(options: dict, ids: "TxnIds", batch: int, rows: Iterator[Any]) -> TaskCommit:
    """Write ``rows`` in a prepared transaction of this task's id in ``ids``."""
    transactional_id = ids.task(batch, _task_partition())
    client = client_for(bootstrap_of(options))
    producer = TransactionalProducer(client, transactional_id)
    producer.begin()
    try:
        _produce(producer, options.get("topic"), rows)
    except BaseException:
        with contextlib.suppress(Exception):  # the driver or a retry aborts it otherwise
            client.abort_transaction(transactional_id)
        raise
    if not producer.records_sent:
        return TaskCommit(ids, transactional_id, -1, -1, 0)
    return TaskCommit(ids, transactional_id, producer.producer_id, producer.producer_epoch,
                      producer.records_sent)


def _produce(producer: TransactionalProducer, fixed_topic: str | None, rows: Iterator[Any]) -> None:
    """Send every row (Spark's Kafka sink columns) and flush."""
    next_partition: dict[str, int] = {}
    for row in rows:
        values = row.asDict()
        topic = fixed_topic or values.get("topic")
        if not topic:
            raise ValueError("a row has no topic (and the option topic is not set)")
        key = _bytes(values.get("key"))
        partition = values.get("partition")
        if partition is None:
            count = producer.partitions(topic)
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = next_partition.get(topic, _task_partition()) % count
                next_partition[topic] = partition + 1
        headers = tuple((h["key"], _bytes(h["value"])) for h in values.get("headers") or ())
        producer.send(topic, partition, SimpleRecord(_bytes(values["value"]), key, headers))
    producer.prepare()


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _task_partition() -> int:
    return _task_context().partitionId()


def _task_context() -> TaskContext:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly sink writes inside Spark tasks only: there is no task here")
    return context


def _local_property(name: str) -> str:
    """A property Spark sets on every task of a streaming query's micro-batch."""
    value = _task_context().getLocalProperty(name)
    if value is None:
        raise RuntimeError(f"Spark set no {name} on this task: the exactly sink writes in a streaming query")
    return value


# -- the driver side ------------------------------------------------------------------------


def settle(client: KafkaClient, sink: str, keep: Iterable[str] = (),
           decided: tuple[TxnIds, int] | None = None) -> None:
    """Commit the Ongoing transactions of the ``decided`` (ids, batch), abort every
    other Ongoing one of ``sink`` except those in ``keep``."""
    keep = set(keep)
    roll_forward = decided[0].of_batch(decided[1]) if decided else None
    for txn in client.list_transactions(TxnIds.of_sink(sink), [ONGOING]):
        if roll_forward is not None and roll_forward.fullmatch(txn.transactional_id):
            init = client.init_producer_id(txn.transactional_id, keep_prepared_txn=True)
            if init.ongoing_producer_id != -1:
                client.end_txn(txn.transactional_id, init.producer_id, init.producer_epoch, commit=True)
        elif txn.transactional_id not in keep:
            client.abort_transaction(txn.transactional_id)


@dataclass(frozen=True)
class Kept:
    """A task's transaction kept for the driver by keepPreparedTxn: the producer id and
    epoch the driver ends it with (the task's own are fenced)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def verify(client: KafkaClient, commits: Sequence[TaskCommit]) -> list[Kept]:
    """Every task's transaction is still its id's Ongoing one, as the task wrote it;
    each is kept for the driver, its task fenced."""
    kept = []
    for commit in commits:
        init = client.init_producer_id(commit.transactional_id, keep_prepared_txn=True)
        if (init.ongoing_producer_id, init.ongoing_producer_epoch) != (commit.producer_id, commit.producer_epoch):
            raise PreparedTransactionLost(
                f"{commit.transactional_id}: the task prepared producer {commit.producer_id} epoch "
                f"{commit.producer_epoch}, the open transaction is {init.ongoing_producer_id}/"
                f"{init.ongoing_producer_epoch}")
        kept.append(Kept(commit.transactional_id, init.producer_id, init.producer_epoch))
    return kept


def complete(client: KafkaClient, kept: Sequence[Kept], batch: int | None = None) -> None:
    """Commit the (verified) transactions; a streaming ``batch`` has a crash point
    between the first and the second."""
    for number, txn in enumerate(kept):
        if number == 1 and batch is not None:
            crash_point("mid-completion", batch)
        client.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit=True)


def written(messages: Iterable[WriterCommitMessage | None]) -> list[TaskCommit]:
    """The task commits that hold a transaction (failed tasks' None dropped)."""
    return [m for m in messages if isinstance(m, TaskCommit) and m.records]


class SinkLog:
    """A sink's decisions, as the committed offset of the sink's group: a streaming
    sink's last decided batch id (metadata: the run that decided it); a batch job's
    abandonment (metadata :data:`ABANDONED`)."""

    ABANDONED = "abandoned"

    def __init__(self, admin: KafkaAdmin, sink: str) -> None:
        self.admin = admin
        self.group = f"{PREFIX}sink-{sink}"
        self.sink = sink

    def latest(self) -> tuple[TxnIds, int] | None:
        """``(the deciding run's ids, batch id)`` of the last decision, None before any."""
        self._topic()
        found = self.admin.fetch_offset(self.group, SINK_COMMITS_TOPIC, 0)
        return None if found is None else (TxnIds(self.sink, found[1]), found[0])

    def decide(self, run: str, batch: int) -> None:
        self._topic()
        self.admin.commit_offset(self.group, SINK_COMMITS_TOPIC, 0, batch, run)

    def abandon(self) -> None:
        """Record that a batch job was aborted (its late tasks abort themselves)."""
        self._topic()
        self.admin.commit_offset(self.group, SINK_COMMITS_TOPIC, 0, 0, self.ABANDONED)

    def abandoned(self) -> bool:
        found = self.latest()
        return found is not None and found[0].run == self.ABANDONED

    def _topic(self) -> None:
        """Create :data:`SINK_COMMITS_TOPIC` (once per admin client) if it is missing."""
        if SINK_COMMITS_TOPIC not in self.admin.known_topics:
            self.admin.create_topic(SINK_COMMITS_TOPIC, 1)
            self.admin.known_topics.add(SINK_COMMITS_TOPIC)


def crash_point(point: str, batch: int) -> None:
    """The test hook: at ``point``, when asked to, SIGKILL the driver's process group
    (the leader of this session: a crash test starts the driver in a session of its
    own) and this worker's (pyspark.daemon puts its workers in a group of their own)."""
    wanted = os.environ.get(CRASH_AT_ENV, "")
    name, _, at_batch = wanted.partition(":")
    if name == point and (not at_batch or int(at_batch) == batch):
        os.killpg(os.getsid(0), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)


# -- the data source writers ------------------------------------------------------------------


class TopicWriter(DataSourceWriter):
    """``df.write.format("exactly")``: one job, one uuid; each task's transaction is
    committed by :meth:`commit` once every task has prepared."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_schema(schema, options)
        self.options = dict(options)
        self.ids = TxnIds(uuid.uuid4().hex, "batch")

    def write(self, rows: Iterator[Any]) -> TaskCommit:
        """Prepare this task's transaction; abort it instead if the job was abandoned
        meanwhile (a task Spark could not stop in time must not leave it open)."""
        commit = write_rows(self.options, self.ids, 0, rows)
        if SinkLog(admin_for(bootstrap_of(self.options)), self.ids.sink).abandoned():
            client = client_for(bootstrap_of(self.options))
            client.abort_transaction(commit.transactional_id)
            raise WriteAbandoned(f"batch write {self.ids.sink} was aborted while this task ran")
        return commit

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        client = client_for(bootstrap_of(self.options))
        commits = written(messages)
        settle(client, self.ids.sink, keep=[c.transactional_id for c in commits])
        complete(client, verify(client, commits))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abandon the job, then abort every task's transaction: fencing each task's id
        stops tasks still running (one message per task: its id is known), and a task
        that begins after the fence sees the abandonment."""
        SinkLog(admin_for(bootstrap_of(self.options)), self.ids.sink).abandon()
        client = client_for(bootstrap_of(self.options))
        for partition in range(len(messages)):
            client.abort_transaction(self.ids.task(0, partition))
        settle(client, self.ids.sink)


class TopicStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("exactly")``: each micro-batch committed once, whatever
    crashes and replays happen (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_schema(schema, options)
        self.options = dict(options)

    def write(self, rows: Iterator[Any]) -> TaskCommit:
        ids = TxnIds(_local_property("sql.streaming.queryId"), _local_property("spark.jobGroup.id"))
        return write_rows(self.options, ids, int(_local_property("streaming.sql.batchId")), rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        reported = [m for m in messages if isinstance(m, TaskCommit)]
        if not reported:
            return  # an empty micro-batch: no task ran, nothing to decide
        ids, commits = reported[0].ids, written(reported)
        client = client_for(bootstrap_of(self.options))
        log = SinkLog(admin_for(bootstrap_of(self.options)), ids.sink)
        decided = log.latest()
        if decided is not None and decided[1] >= batchId:
            settle(client, ids.sink, decided=decided)  # a replay: its new transactions go
            return
        settle(client, ids.sink, keep=[c.transactional_id for c in commits], decided=decided)
        kept = verify(client, commits)
        crash_point("before-decision", batchId)
        log.decide(ids.run, batchId)
        crash_point("after-decision", batchId)
        complete(client, kept, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort the batch's transactions unless it was decided (then they commit);
        with no task message the sink is unknown here, and the next commit settles."""
        reported = [m for m in messages if isinstance(m, TaskCommit)]
        if reported:
            client = client_for(bootstrap_of(self.options))
            sink = reported[0].ids.sink
            settle(client, sink, decided=SinkLog(admin_for(bootstrap_of(self.options)), sink).latest())

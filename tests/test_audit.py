"""The exactly-once audit (``exactly/app/engine/audit.py``) against real confluent-kafka clients.

One broker for the module (each test has its own topics, group and transactional
ids). A correct consume-transform-produce loop passes, also after an aborted attempt
(listed with its cause); each kind of violation the audit claims to catch is built
on purpose: a gap, a duplicate (a zombie with another producer id on the same group),
offsets committed outside a transaction, output without offsets, output outside any
transaction.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from exactly.app import Broker
from exactly.app.cli import main as cli
from exactly.app.engine.audit import AuditView, ViolationKind
from exactly.app.http import create_app
from exactly.app.http.server import HttpServer
from exactly.app.lineage import HEADER, InputRecord, header, parse
from exactly.app.testing import lineage
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvalidRequestError, UnknownTopicOrPartitionError
from exactly.storage.record_batch import SimpleRecord, encode_batch
from exactly.coordinator.mirror_db import reader_engine
from tests.kafka_support import KafkaBroker, free_port
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

RECORDS = 6
_names = itertools.count()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(Path(tmp_path_factory.mktemp("audit")) / "data") as served:
        yield served


@pytest.fixture(scope="module")
def http(kafka: KafkaBroker) -> Iterator[str]:
    """The broker's HTTP API (with its SQLite mirror), served by waitress."""
    web = create_app(kafka.engine, test_config={"TESTING": True}, mirror=kafka.broker.mirror)
    sock = socket.create_server(("127.0.0.1", 0))
    server = HttpServer(web, sock, threads=2).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.close()
        sock.close()


class App:
    """One test's topics, group and clients: ``in-N`` (filled with :data:`RECORDS`
    records) -> ``out-N``, group ``g-N``."""

    def __init__(self, kafka: KafkaBroker) -> None:
        n = next(_names)
        self.kafka, self.input, self.output, self.group = kafka, f"in-{n}", f"out-{n}", f"g-{n}"
        kafka.broker.create_topic(self.input, 1)
        kafka.broker.create_topic(self.output, 1)
        self.clients: list = []
        plain = Producer({"bootstrap.servers": kafka.bootstrap})
        for i in range(RECORDS):
            plain.produce(self.input, value=f"v{i}".encode(), partition=0)
        assert plain.flush(10) == 0

    def consumer(self) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition(self.input, 0)])
        self.clients.append(consumer)
        return consumer

    def producer(self, transactional_id: str | None = None) -> Producer:
        config = {"bootstrap.servers": self.kafka.bootstrap, "linger.ms": 0}
        if transactional_id:
            config["transactional.id"] = f"{self.group}-{transactional_id}"
        producer = Producer(config)
        self.clients.append(producer)
        if transactional_id:
            producer.init_transactions(10)
        return producer

    def consume(self, consumer: Consumer, count: int) -> list:
        got: list = []
        eventually(lambda: got.extend(m for m in consumer.consume(count - len(got), 0.2) if not m.error())
                   or len(got) >= count, 20, f"{count} input records")
        return got

    def transform(self, producer: Producer, consumer: Consumer, messages: list, commit_offset: int | None,
                  commit: bool = True) -> None:
        """One transaction: each input's value to the output, the offsets with it (unless None)."""
        producer.begin_transaction()
        for message in messages:
            producer.produce(self.output, value=message.value(), partition=0)
        if commit_offset is not None:
            producer.send_offsets_to_transaction([TopicPartition(self.input, 0, commit_offset)],
                                                 consumer.consumer_group_metadata(), 10)
        if commit:
            producer.commit_transaction(10)
        else:
            assert producer.flush(10) == 0  # written, then aborted (abort_transaction drops what is unsent)
            producer.abort_transaction(10)

    def audit(self, records_per_input: int | None = None) -> AuditView:
        return self.kafka.engine.audit(self.group, self.input, self.output, records_per_input)

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(KafkaException):  # a fenced producer's close says so
                client.close()


@pytest.fixture
def app(kafka: KafkaBroker) -> Iterator[App]:
    made = App(kafka)
    yield made
    made.close()


def kinds(view: AuditView) -> list[ViolationKind]:
    return [v.kind for v in view.violations]


def test_a_correct_loop_passes_and_lists_its_aborted_attempt_with_its_cause(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    first = app.consume(consumer, 3)
    app.transform(producer, consumer, first, 3, commit=False)  # an attempt, aborted by the application
    consumer.seek(TopicPartition(app.input, 0, 0))  # back to the committed offset (none: the log start)
    messages = app.consume(consumer, RECORDS)
    app.transform(producer, consumer, messages[:4], 4)
    app.transform(producer, consumer, messages[4:], RECORDS)

    view = app.audit(records_per_input=1)

    assert view.ok, view.violations
    assert [(t.outcome, [(r.from_offset, r.to_offset) for r in t.inputs], t.output_records)
            for t in view.transactions] == [("COMMIT", [(0, 4)], 4), ("COMMIT", [(4, RECORDS)], 2)]
    assert all(t.transactional_id == f"{app.group}-t" for t in view.transactions)
    (aborted,) = view.aborted
    assert (aborted.outcome, aborted.abort_cause, aborted.output_records) == ("ABORT", "client", 3)
    assert [(r.from_offset, r.to_offset) for r in aborted.inputs] == [(0, 3)]
    assert view.partitions[0].committed_offset == RECORDS


def test_a_fenced_instance_is_an_aborted_attempt_and_its_successor_passes(app: App) -> None:
    """The same transactional id started again: the new instance's init_transactions
    bumps the epoch and aborts the old one's open transaction (its marker at the new
    epoch); the chain continues with the new epoch."""
    consumer, old = app.consumer(), app.producer("t")
    messages = app.consume(consumer, RECORDS)
    app.transform(old, consumer, messages[:2], 2)
    old.begin_transaction()
    old.produce(app.output, value=b"half done", partition=0)
    assert old.flush(10) == 0
    new = app.producer("t")  # fences the old instance
    app.transform(new, consumer, messages[2:], RECORDS)

    view = app.audit(records_per_input=1)

    assert view.ok, view.violations
    (aborted,) = view.aborted
    assert (aborted.abort_cause, aborted.output_records, aborted.inputs) == ("fenced", 1, ())
    first, second = view.transactions
    assert first.producer_id == aborted.producer_id == second.producer_id
    assert first.producer_epoch < aborted.producer_epoch < second.producer_epoch  # bumped by the fence, then by init


def test_a_gap_is_caught_when_a_transaction_commits_past_what_it_consumed(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    messages = app.consume(consumer, 3)
    app.transform(producer, consumer, messages, 5)  # consumed [0, 3), committed 5: offsets 3 and 4 skipped

    view = app.audit(records_per_input=1)

    assert not view.ok
    gap, waiting = view.violations
    assert (gap.kind, gap.topic, gap.partition, gap.start_offset, gap.end_offset) == \
        (ViolationKind.GAP, app.input, 0, 0, 5)
    assert "(5 records) but wrote 3" in gap.detail
    assert (waiting.kind, waiting.start_offset, waiting.end_offset) == (ViolationKind.GAP, 5, RECORDS)
    assert waiting.detail.startswith("not processed yet: 1 input record after the committed offset 5")


def test_a_commit_past_the_high_watermark_is_a_gap_without_a_ratio(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    app.transform(producer, consumer, app.consume(consumer, RECORDS), RECORDS + 2)

    (gap,) = app.audit().violations
    assert (gap.kind, gap.start_offset, gap.end_offset) == (ViolationKind.GAP, RECORDS, RECORDS + 2)


def test_a_zombie_with_another_producer_id_duplicates_and_is_caught(app: App) -> None:
    """Two instances with different transactional ids (so no fencing) on the same group
    and partition both process [0, 6): the second's commit advances nothing."""
    first, zombie = (app.consumer(), app.producer("a")), (app.consumer(), app.producer("b"))
    inputs = [app.consume(consumer, RECORDS) for consumer, _ in (first, zombie)]
    app.transform(first[1], first[0], inputs[0], RECORDS)
    app.transform(zombie[1], zombie[0], inputs[1], RECORDS)

    view = app.audit()

    (duplicate,) = view.violations  # the zombie's output, which no input offset paid for
    assert (duplicate.kind, duplicate.topic, duplicate.partition) == (ViolationKind.DUPLICATE, app.output, 0)
    assert (duplicate.start_offset, duplicate.end_offset) == (RECORDS + 1, 2 * RECORDS + 1)  # after the first's marker
    assert "zombie" in duplicate.likely_cause
    assert duplicate.producer_id == view.transactions[1].producer_id != view.transactions[0].producer_id
    assert [(r.from_offset, r.to_offset) for t in view.transactions for r in t.inputs] == \
        [(0, RECORDS), (RECORDS, RECORDS)]


def test_offsets_committed_outside_the_transaction_are_caught(app: App) -> None:
    """The broken variant: output in a transaction, offsets with a plain commit."""
    consumer, producer = app.consumer(), app.producer("t")
    app.transform(producer, consumer, app.consume(consumer, RECORDS), None)
    consumer.commit(offsets=[TopicPartition(app.input, 0, RECORDS)], asynchronous=False)

    view = app.audit()

    assert sorted(kinds(view), key=lambda k: k.value) == [ViolationKind.OFFSETS_OUTSIDE_TRANSACTION,
                                                          ViolationKind.OUTPUT_WITHOUT_OFFSETS]
    plain = next(v for v in view.violations if v.kind is ViolationKind.OFFSETS_OUTSIDE_TRANSACTION)
    assert (plain.topic, plain.partition, plain.start_offset, plain.end_offset) == (app.input, 0, 0, RECORDS)


def test_output_without_offsets_in_its_transaction_is_caught(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    messages = app.consume(consumer, RECORDS)
    app.transform(producer, consumer, messages[:2], 2)
    app.transform(producer, consumer, messages[2:], None)  # committed output, no offsets

    view = app.audit()

    violation, waiting = view.violations
    assert (violation.kind, violation.topic, violation.partition) == \
        (ViolationKind.OUTPUT_WITHOUT_OFFSETS, app.output, 0)
    assert (violation.start_offset, violation.end_offset) == (3, 3 + RECORDS - 2)  # after [0,1] and its marker at 2
    # the input after the committed offset: no transaction committed it, whatever output was written for it
    assert (waiting.kind, waiting.topic, waiting.start_offset, waiting.end_offset) == \
        (ViolationKind.GAP, app.input, 2, RECORDS)
    assert "committed no offsets" in waiting.likely_cause


def test_output_written_without_a_transaction_is_caught(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    app.transform(producer, consumer, app.consume(consumer, RECORDS), RECORDS)
    plain = app.producer()
    plain.produce(app.output, value=b"stray", partition=0)
    assert plain.flush(10) == 0

    (violation,) = app.audit().violations
    assert (violation.kind, violation.topic, violation.start_offset, violation.end_offset) == \
        (ViolationKind.OUTPUT_OUTSIDE_TRANSACTION, app.output, RECORDS + 1, RECORDS + 2)


def test_until_ends_the_audit_where_the_test_says(app: App, http: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An application still running, audited up to where it got (in Python, over HTTP
    with the CLI); past the high watermark, or on a partition the topic lacks, the
    audit is refused."""
    consumer, producer = app.consumer(), app.producer("t")
    app.transform(producer, consumer, app.consume(consumer, RECORDS)[:4], 4)

    (waiting,) = app.audit().violations
    assert (waiting.kind, waiting.start_offset, waiting.end_offset) == (ViolationKind.GAP, 4, RECORDS)
    until = app.kafka.engine.audit(app.group, app.input, app.output, until={0: 4})
    assert until.ok and until.partitions[0].audited_to == 4, until.violations
    with pytest.raises(InvalidRequestError, match="high watermark 6"):
        app.kafka.engine.audit(app.group, app.input, app.output, until={0: RECORDS + 1})
    with pytest.raises(UnknownTopicOrPartitionError):
        app.kafka.engine.audit(app.group, app.input, app.output, until={1: 0})
    command = ["audit", app.group, "--input", app.input, "--output", app.output, "--http", http]
    assert cli.main([*command, "--until", "0:4"]) == 0
    assert f"{app.input}-0: log start 0, high watermark {RECORDS}, committed 4, audited to 4" in capsys.readouterr().out
    assert cli.main([*command, "--until", f"0:{RECORDS + 1}"]) == 2
    assert "INVALID_REQUEST" in capsys.readouterr().err


def test_lineage_from_the_embedded_clients_is_checked_record_by_record(app: App) -> None:
    """The embedded consumer's records, turned into output by the embedded producer with
    ``lineage(record)``: the audit checks each input record, and says so."""
    broker = app.kafka.broker
    consumer = broker.consumer(group_id=app.group, isolation_level="read_committed", enable_auto_commit=False,
                               auto_offset_reset="earliest")
    producer = broker.producer(transactional_id=f"{app.group}-embedded")
    try:
        consumer.assign([(app.input, 0)])
        records: list = []
        eventually(lambda: records.extend(consumer.poll(timeout_ms=200)) or len(records) >= RECORDS, 20,
                   "the input")
        producer.init_transactions()
        for batch in (records[:2], records[2:]):
            producer.begin_transaction()
            for record in batch:
                producer.send(app.output, b"out " + record.value, partition=0, headers=[lineage(record)])
            producer.send_offsets_to_transaction({(app.input, 0): batch[-1].offset + 1}, consumer.group_metadata())
            producer.commit_transaction()
    finally:
        producer.close()
        consumer.close()

    view = app.audit()
    assert (view.ok, view.mode, view.lineage) == (True, "lineage", True), view.violations
    assert "exactly.input" in view.checked


def test_lineage_names_output_without_its_header_and_input_never_received(app: App) -> None:
    """With lineage, committed output without the header, or naming an input offset
    that holds no record, is OUTPUT_WITHOUT_INPUT at its exact offsets."""
    consumer, producer = app.consumer(), app.producer("t")
    messages = app.consume(consumer, RECORDS)
    producer.begin_transaction()
    for message in messages:
        producer.produce(app.output, value=message.value(), partition=0, headers=[lineage(message)])
    producer.produce(app.output, value=b"no header", partition=0)
    producer.produce(app.output, value=b"made up", partition=0, headers=[header(app.input, 0, RECORDS + 5)])
    producer.send_offsets_to_transaction([TopicPartition(app.input, 0, RECORDS)], consumer.consumer_group_metadata(),
                                         10)
    producer.commit_transaction(10)

    view = app.audit()
    assert view.mode == "lineage"
    assert sorted((v.kind, v.topic, v.start_offset, v.end_offset) for v in view.violations) == [
        (ViolationKind.OUTPUT_WITHOUT_INPUT, app.input, RECORDS + 5, RECORDS + 6),
        (ViolationKind.OUTPUT_WITHOUT_INPUT, app.output, RECORDS, RECORDS + 1)]


def test_input_compaction_removed_records_from_is_counted_as_it_is_read(broker: Broker, clock: FakeClock) -> None:
    """A compacted input batch keeps its offset range but not every record: the audit
    counts (and, with lineage, expects output for) only the records left, as a
    consumer reads them."""
    broker.create_topic("in", 1, {"cleanup.policy": "compact"})
    broker.produce("in", 0, encode_batch([SimpleRecord(b"old", key=b"a"), SimpleRecord(b"b", key=b"b"),
                                         SimpleRecord(b"new", key=b"a")]))
    log = broker.engine.partitions.log("in", 0)
    broker.engine.call(lambda: log.roll())
    broker.engine.call(lambda: run_inline(log.clean(clock.now_ms())))
    for group, with_lineage in (("counted", False), ("named", True)):
        broker.create_topic(f"out-{group}", 1)
        consumer = broker.consumer(group_id=group, isolation_level="read_committed", enable_auto_commit=False,
                                   auto_offset_reset="earliest")
        producer = broker.producer(transactional_id=group)
        try:
            consumer.assign([("in", 0)])
            records: list = []
            eventually(lambda: records.extend(consumer.poll(timeout_ms=200)) or len(records) >= 2, 20, "the input")
            assert [r.offset for r in records] == [1, 2]  # offset 0 is gone: its key was written again
            producer.init_transactions()
            producer.begin_transaction()
            for record in records:
                producer.send(f"out-{group}", record.value, partition=0,
                              headers=[lineage(record)] if with_lineage else None)
            producer.send_offsets_to_transaction({("in", 0): 3}, consumer.group_metadata())
            producer.commit_transaction()
        finally:
            producer.close()
            consumer.close()
        view = broker.engine.audit(group, "in", f"out-{group}", records_per_input=1)
        assert (view.ok, view.mode) == (True, "lineage" if with_lineage else "records_per_input"), view.violations


@given(topic=st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True), partition=st.integers(0, 2**31 - 1),
       offset=st.integers(0, 2**63 - 1))
def test_the_lineage_header_names_any_record_of_any_topic(topic: str, partition: int, offset: int) -> None:
    key, value = header(topic, partition, offset)
    assert key == HEADER and parse(value) == InputRecord(topic, partition, offset)


@pytest.mark.parametrize("value", [None, b"", b"orders", b"orders@1", b"orders-x@1", b"-0@1", b"orders-0@",
                                   b"orders-0@-1", b"\xff-0@1"])
def test_a_lineage_value_that_names_no_record_is_none(value: bytes | None) -> None:
    assert parse(value) is None


# -- the surfaces: HTTP, the CLI, the mirror's table ------------------------------------------


def test_the_cli_prints_the_chain_and_exits_0_when_it_held_and_the_mirror_keeps_the_rows(
        app: App, http: str, capsys: pytest.CaptureFixture[str]) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    messages = app.consume(consumer, RECORDS)
    app.transform(producer, consumer, messages[:2], 2, commit=False)
    app.transform(producer, consumer, messages, RECORDS)

    status = cli.main(["audit", app.group, "--input", app.input, "--output", app.output, "--http", http,
                       "--records-per-input", "1"])

    out = capsys.readouterr().out
    assert status == 0, out
    assert f"[0, {RECORDS}) COMMIT {app.group}-t" in out
    assert "aborted: ABORT " in out and "cause client" in out
    assert out.rstrip().endswith("exactly once: held")
    db = reader_engine(app.kafka.broker.mirror.path)
    try:
        with db.connect() as connection:
            rows = connection.execute(text(
                "SELECT outcome, from_offset, to_offset, output_records, abort_cause, audit_ok "
                "FROM audit_transactions WHERE group_id = :g ORDER BY offsets_marker_offset"), {"g": app.group}).all()
    finally:
        db.dispose()
    assert [tuple(r) for r in rows] == [("ABORT", 0, 2, 2, "client", 1), ("COMMIT", 0, RECORDS, RECORDS, None, 1)]


def test_the_cli_exits_1_with_the_offsets_when_it_was_violated(app: App, http: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    consumer = app.consumer()
    app.consume(consumer, RECORDS)
    consumer.commit(offsets=[TopicPartition(app.input, 0, 3)], asynchronous=False)

    status = cli.main(["audit", app.group, "--input", app.input, "--output", app.output, "--http", http])

    out = capsys.readouterr().out
    assert status == 1
    assert f"VIOLATION OFFSETS_OUTSIDE_TRANSACTION {app.input}-0 [0, 3)" in out
    assert "  likely cause: offsets must be sent with send_offsets_to_transaction" in out
    assert f"VIOLATION GAP {app.input}-0 [3, {RECORDS}): not processed yet" in out
    assert "exactly once: VIOLATED (2)" in out


def test_the_cli_exits_2_when_it_cannot_ask(http: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["audit", "g", "--input", "in", "--output", "out", "--http",
                     f"http://127.0.0.1:{free_port()}"]) == 2
    assert cli.main(["audit", "g", "--input", "no-such-topic", "--output", "out", "--http", http]) == 2
    assert "no-such-topic" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli.main(["audit", "g"])
    assert usage.value.code == 2


def test_the_console_audits_from_the_group_page(app: App) -> None:
    consumer, producer = app.consumer(), app.producer("t")
    messages = app.consume(consumer, RECORDS)
    app.transform(producer, consumer, messages[:RECORDS - 1], RECORDS - 1)
    app.transform(producer, consumer, messages[RECORDS - 1:], RECORDS)
    client = create_app(app.kafka.engine, test_config={"TESTING": True}).test_client()

    group_page = client.get(f"/groups/{app.group}").get_data(as_text=True)
    assert f'href="/audit?group={app.group}"' in group_page
    page = client.get(f"/audit?group={app.group}&input={app.input}&output={app.output}&ratio=1")

    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert "exactly once" in html and 'id="violations"' not in html
    assert f"[0, {RECORDS - 1})" in html and f"[{RECORDS - 1}, {RECORDS})" in html
    assert "records_per_input" in html  # what was checked
    assert f"<option selected>{app.input}</option>" in html
    unknown = client.get(f"/audit?group={app.group}&input=no-such-topic&output={app.output}")
    assert 'id="audit-error"' in unknown.get_data(as_text=True)

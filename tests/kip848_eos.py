"""The driver of the KIP-848 exactly-once scenario (the application is
tests/kip848_eos_child.py): the input written, members started, restarted and killed,
progress read from the group's committed offsets, and the output checked -- every
input record in ``OUTPUT`` exactly once, in input order per partition, and the
group's committed offsets at the input's end. :func:`through_kills` SIGKILLs the broker
too: on Exactly (tests/test_consumer_group_eos.py) and on Kafka 4.4
(tests/kafka/test_consumer_group_eos.py, which also runs a member's replacement on both)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_support import read_to_end
from tests.kip848_eos_child import PARTITIONS, Names, client_config, input_value, names, parse_output
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]


def prepare(bootstrap: str, per_partition: int, run: Names = names()) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(run.input, PARTITIONS, 1),
                                       NewTopic(run.output, PARTITIONS, 1)]).values():
        future.result(30)
    write_input(bootstrap, 0, per_partition, run)


def write_input(bootstrap: str, start: int, end: int, run: Names = names()) -> None:
    """The input records of offsets ``start`` to ``end`` (exclusive) of every partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for offset in range(start, end):
        for partition in range(PARTITIONS):
            producer.produce(run.input, input_value(partition, offset), key=b"k%d" % (offset % 7),
                             partition=partition)
    assert producer.flush(60) == 0


class Member:
    """One application process in slot ``slot`` (its transactional id), of ``protocol``."""

    def __init__(self, bootstrap: str, slot: int, logs: Path, protocol: str = "consumer", prefix: str = "") -> None:
        self.slot = slot
        self.log = logs / f"member-{slot}.log"
        with self.log.open("ab") as log:  # a file, not a pipe: librdkafka's logs never block it
            self.process = subprocess.Popen([sys.executable, "-m", "tests.kip848_eos_child", bootstrap, str(slot),
                                             protocol, prefix],
                                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
                                            env={**os.environ, "PYTHONPATH": str(REPO)})

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def dump_stacks(self) -> None:
        """Where a running member is (SIGUSR1: its threads' stacks, to its log)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            try:
                eventually(lambda: "most recent call first" in self.errors(), 10, "the member's stacks")
            except pytest.fail.Exception:  # no stacks: the rest of its log says what it can
                pass

    def stop(self) -> None:
        """SIGTERM: it finishes its transaction and leaves the group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)

    def errors(self) -> str:
        """The end of what this slot's processes wrote to stderr."""
        return self.log.read_text(errors="replace")[-3000:]


def committed(bootstrap: str, run: Names = names()) -> int:
    """Input records the group has committed (0 while the broker does not answer), asked
    by a consumer of the group that does not join it. Not by an AdminClient: its
    ``list_consumer_group_offsets`` crashes librdkafka 2.16 (SIGSEGV) when the
    coordinator answers that it is still loading, as Kafka's does after a restart -- the
    OffsetFetch handler asks for the consumer group of a client that has none."""
    consumer = Consumer({**client_config(bootstrap), "group.id": run.group})
    try:
        offsets = consumer.committed([TopicPartition(run.input, p) for p in range(PARTITIONS)], 5)
    except KafkaException:  # the broker is down or restarting: no progress seen
        return 0
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in offsets if not tp.error)


def check_exactly_once(bootstrap: str, per_partition: int, run: Names = names()) -> None:
    values = read_to_end({"bootstrap.servers": bootstrap, "group.id": f"{run.group}-verify",
                          "isolation.level": "read_committed"}, run.output, PARTITIONS, timeout=60,
                         select=lambda m: (m.partition(), m.value()))
    seen = [(out_partition, parse_output(value)) for out_partition, value in values]
    counts = Counter(source for _, source in seen)
    duplicated = sorted(source for source, n in counts.items() if n > 1)
    assert not duplicated, f"input records processed more than once: {duplicated[:20]}"
    expected = {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
    missing = sorted(expected - set(counts))
    assert not missing, f"input records never processed: {missing[:20]}"
    by_partition: dict[int, list[int]] = defaultdict(list)
    for out_partition, (in_partition, offset) in seen:
        assert out_partition == in_partition
        by_partition[out_partition].append(offset)
    for partition, offsets in by_partition.items():
        assert offsets == sorted(offsets), f"{run.output}-{partition} is out of input order"
    assert committed(bootstrap, run) == PARTITIONS * per_partition


class KillableBroker(Protocol):
    """A broker on a data directory that survives a SIGKILL: ``ServedBroker`` (Exactly's
    ``run.py``) or ``RealKafka``."""

    @property
    def bootstrap(self) -> str: ...

    def kill(self) -> None: ...

    def start(self) -> object: ...


#: what happens at each eighth of the input: the broker or a member dies (SIGKILL), or a
#: member is replaced (SIGTERM: it leaves the group); the slot's new process takes over
EVENTS = ("broker", "member", "broker", "restart", "member", "broker")


def through_kills(broker: KillableBroker, logs: Path, per_partition: int) -> None:
    """Two members process the input while :data:`EVENTS` happen; then the output is
    checked. Each kill lands while transactions, heartbeats and reconciliations are
    under way, so the group (members, epochs, target assignment) and the pending
    transactional offsets are recovered from ``__consumer_offsets`` as a crash left them."""
    prepare(broker.bootstrap, per_partition)
    members = [Member(broker.bootstrap, 0, logs), Member(broker.bootstrap, 1, logs)]
    total = PARTITIONS * per_partition
    try:
        for step, action in enumerate(EVENTS, start=1):
            eventually(lambda: committed(broker.bootstrap) >= total * step // 8, timeout=120, interval=0.5,
                       what=f"the application to commit {step}/8 of the input before the {action} event")
            if action == "broker":
                broker.kill()
                broker.start()
            else:
                old = members.pop(0)
                old.kill() if action == "member" else old.stop()
                members.append(Member(broker.bootstrap, old.slot, logs))
        eventually(lambda: committed(broker.bootstrap) == total, timeout=180, interval=0.5,
                   what="the application to commit the whole input")
        for member in members:
            member.stop()
        check_exactly_once(broker.bootstrap, per_partition)
    except BaseException as failure:
        for member in members:
            member.dump_stacks()
            member.kill()
            failure.add_note(f"member {member.slot}: {member.errors()}")
        raise

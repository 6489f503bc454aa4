"""The driver of the KIP-848 exactly-once scenario (the application is
tests/kip848_eos_child.py): the input written, members started, restarted and killed,
progress read from the group's committed offsets, and the output checked -- every
input record in ``OUTPUT`` exactly once, in input order per partition, and the
group's committed offsets at the input's end. Run on Kafka 4.4 and Exactly alike by
tests/kafka/test_consumer_group_eos.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_support import read_to_end
from tests.kip848_eos_child import GROUP, INPUT, OUTPUT, PARTITIONS, input_value, parse_output

REPO = Path(__file__).resolve().parents[1]


def prepare(bootstrap: str, per_partition: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for offset in range(per_partition):
        for partition in range(PARTITIONS):
            producer.produce(INPUT, input_value(partition, offset), key=b"k%d" % (offset % 7), partition=partition)
    assert producer.flush(60) == 0


class Member:
    """One application process in slot ``slot`` (its transactional id)."""

    def __init__(self, bootstrap: str, slot: int, logs: Path) -> None:
        self.slot = slot
        self.log = logs / f"member-{slot}.log"
        with self.log.open("ab") as log:  # a file, not a pipe: librdkafka's logs never block it
            self.process = subprocess.Popen([sys.executable, "-m", "tests.kip848_eos_child", bootstrap, str(slot)],
                                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
                                            env={**os.environ, "PYTHONPATH": str(REPO)})

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


def committed(bootstrap: str) -> int:
    """Input records the group has committed (0 while the broker does not answer)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    try:
        from confluent_kafka import ConsumerGroupTopicPartitions
        request = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(INPUT, p) for p in range(PARTITIONS)])
        answer = admin.list_consumer_group_offsets([request], request_timeout=5)[GROUP].result(10)
    except Exception:  # noqa: BLE001 -- the broker is down or restarting: no progress seen
        return 0
    return sum(max(tp.offset, 0) for tp in answer.topic_partitions if not tp.error)


def check_exactly_once(bootstrap: str, per_partition: int) -> None:
    values = read_to_end({"bootstrap.servers": bootstrap, "group.id": "eos-848-verify",
                          "isolation.level": "read_committed"}, OUTPUT, PARTITIONS, timeout=60,
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
        assert offsets == sorted(offsets), f"{OUTPUT}-{partition} is out of input order"
    assert committed(bootstrap) == PARTITIONS * per_partition

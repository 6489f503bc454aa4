"""Kafka's Java client on Exactly as on Apache Kafka (``JavaClients.java``, one JVM per
broker, the two side by side): an idempotent producer; a transactional
consume-transform-produce loop with the consumer's group metadata in each transaction
(KIP-447), one transaction aborted; a read_committed consumer that reads each input
record once; and the AdminClient's calls -- topics, configs, partitions, consumer groups,
listTransactions / describeTransactions / describeProducers, abortTransaction,
fenceProducers, delete records, ACLs. Every step prints one line, the same on both
brokers; a step the broker rejects prints its exception.
"""

from __future__ import annotations

from typing import Callable

import pytest

from tests.kafka.differential import Peer, unique
from tests.kafka.real_kafka import JavaPrograms
from tests.kafka.test_java_clients import both

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(240)]

#: what the program prints, step by step, on both brokers (the topics are "<name>-in",
#: "<name>-out"; 30 records, 15 per input partition; the second transaction aborted)
EXPECTED = [
    "topics: listed true, partitions 2 2, leader 1",
    "configs: retention.ms 3600000 DYNAMIC_TOPIC_CONFIG, broker num.partitions 1 DEFAULT_CONFIG",
    "partitions: out now 3",
    "idempotent producer: acked 30",
    "consume-transform-produce: copied 30, aborted 1",
    "read_committed: 30 values, each once true, committed offsets {0=15, 1=15}, more in the log than read true",
    "consumer groups: listed true, Empty with 0 members, protocol type 'Classic', offsets {0=15, 1=15}, "
    "after alter and delete {0=5}, deleted true",
    "transactions: listed CompleteCommit, described CompleteCommit timeout 60000 topics 0, producers on out-0 1 open 0",
    "abort transaction: open at 0, stable end 0 then 2",
    "fence producers: the fenced producer's commit ProducerFencedException, then Empty at epoch 2",
    "delete records: low watermark 2, earliest 2",
    "acls: described [(pattern=ResourcePattern(resourceType=TOPIC, name=<name>-in, patternType=PREFIXED), "
    "entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW))], deleted 1, left 0",
    "delete topics: gone true",
]


def java_clients(java: JavaPrograms, name: str) -> Callable[[Peer], list[str]]:
    def run(peer: Peer) -> list[str]:
        done = java.run("JavaClients", peer.bootstrap, name, timeout=200)
        assert done.returncode == 0, f"{peer.name}: {done.stdout}{done.stderr[-5000:]}"
        return done.stdout.replace(name, "<name>").splitlines()
    return run


def test_kafkas_java_client_does_the_same_on_exactly_as_on_kafka(brokers: tuple[Peer, Peer],
                                                                  java_programs: JavaPrograms) -> None:
    kafka, exactly = both(brokers, java_clients(java_programs, unique("java")))
    assert exactly == kafka
    assert exactly == EXPECTED

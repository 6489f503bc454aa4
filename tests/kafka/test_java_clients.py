"""Kafka's own Java client, tools and Streams against Apache Kafka and against Exactly:
the operator's tools (kafka-topics, kafka-configs, kafka-consumer-groups,
kafka-transactions -- describe-producers, abort of an open transaction) print the same,
and a Kafka Streams application with ``exactly_once_v2`` (a repartition topic, a state
store's changelog, transactions carrying its offsets) counts exactly once on both.
Each broker's Java programs run in one JVM (``KafkaTools.java``, ``StreamsWordCount.java``),
the two brokers' side by side."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka import Producer

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    OFFSET_COMMIT,
    Peer,
    create_topics,
    init_producer_id,
    list_offset,
    plain,
    produce,
    unique,
)
from tests.kafka.real_kafka import JavaPrograms
from tests.kafka.test_transactions import wait_for

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(180)]
TOOLS = "org.apache.kafka.tools."


def both(brokers: tuple[Peer, Peer], run: Callable[[Peer], Any]) -> tuple[Any, Any]:
    """``run`` for each broker at once (each is mostly a JVM of its own)."""
    with ThreadPoolExecutor(2) as pool:
        kafka, exactly = pool.map(run, brokers)
    return kafka, exactly


def tool_outputs(output: str) -> list[tuple[int, str]]:
    """KafkaTools' output: (exit status, standard output) per tool."""
    return [(int(status), text) for status, text in re.findall(r"^=== (-?\d+)\n(.*?)(?=^=== |\Z)", output, re.M | re.S)]


def transaction_held_open(peer: Peer, t: str) -> None:
    """Topic ``t``: a committed transaction (offsets 0-2 with its marker), then an open
    one from offset 3 that holds the LSO; a group's committed offsets."""
    create_topics(peer, {t: (2, {"retention.ms": "3600000"})})
    connection = peer.connection()
    init = init_producer_id(connection, t + "-tx")
    pid, epoch = init["producer_id"], init["producer_epoch"]
    add = {"v3_and_below_transactional_id": t + "-tx", "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": t, "partitions": [0]}]}
    for sequence, commit in ((0, True), (2, None)):
        # CONCURRENT_TRANSACTIONS while Kafka writes the first transaction's markers
        wait_for(lambda: _partition_error(plain(connection.request(ADD_PARTITIONS_TO_TXN, 3, add))) != 51,
                 "the coordinator to take the next transaction")
        batch = encode_batch([SimpleRecord(b"a", key=b"k"), SimpleRecord(b"b", key=b"k")], producer_id=pid,
                             producer_epoch=epoch, base_sequence=sequence, transactional=True)
        assert produce(connection, t, 0, batch, transactional_id=t + "-tx")["error_code"] == 0
        if commit:
            assert plain(connection.request(END_TXN, 3, {"transactional_id": t + "-tx", "producer_id": pid,
                                                         "producer_epoch": epoch, "committed": True}))["error_code"] == 0
    plain(connection.request(OFFSET_COMMIT, 7, {"group_id": t + "-g", "generation_id_or_member_epoch": -1, "member_id": "",
                                                "group_instance_id": None, "topics": [{"name": t, "partitions": [
                                                    {"partition_index": 0, "committed_offset": 2,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}))


def _partition_error(added: dict) -> int:
    return added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]


def operator_tools(java: JavaPrograms, t: str) -> Callable[[Peer], tuple[list, int]]:
    def run(peer: Peer) -> tuple[list, int]:
        transaction_held_open(peer, t)
        bootstrap = ["--bootstrap-server", peer.bootstrap]
        wait_for_markers(peer, t, 3)
        runs = [[TOOLS + "TopicCommand", *bootstrap, "--describe", "--topic", t],
                [TOOLS + "ConfigCommand", *bootstrap, "--describe", "--entity-type", "topics", "--entity-name", t],
                [TOOLS + "consumer.group.ConsumerGroupCommand", *bootstrap, "--describe", "--group", t + "-g"],
                [TOOLS + "TransactionsCommand", *bootstrap, "describe-producers", "--topic", t, "--partition", "0"],
                [TOOLS + "TransactionsCommand", *bootstrap, "abort", "--topic", t, "--partition", "0",
                 "--start-offset", "3"],
                [TOOLS + "TransactionsCommand", *bootstrap, "describe-producers", "--topic", t, "--partition", "0"]]
        done = java.run("KafkaTools", *[arg for run in runs for arg in ["---", *run]][1:])
        assert done.returncode == 0, done.stderr[-3000:]
        return [normalize(text) for text in tool_outputs(done.stdout)], list_offset(peer.connection(), t, -1, 1)["offset"]
    return run


def wait_for_markers(peer: Peer, t: str, lso: int) -> None:
    wait_for(lambda: list_offset(peer.connection(), t, -1, 1)["offset"] == lso, "the committed transaction's marker")


#: what each broker prints of its own: topic ids, times, producer ids and coordinator
#: epochs (a describe-producers row: id, epoch, coordinator epoch, sequence, time, start)
_OWN = [(re.compile(r"TopicId: [A-Za-z0-9_-]{22}\t"), "TopicId: <id>\t"), (re.compile(r"\b1\d{12}\b"), "<time>"),
        (re.compile(r"(?m)^\d+(\s+-?\d+\s+)-?\d+(\s+-?\d+\s+<time>)"), r"<pid>\1<epoch>\2")]


def without_kafka_4s_topic_fields(described: str) -> str:
    """kafka-topics --describe's output without what only Kafka 4 prints: its cluster-wide
    min.insync.replicas (KIP-966's format). Topic ids (each broker's own) go in
    :func:`normalize`; the ELR fields both print alike (DescribeTopicPartitions)."""
    return re.sub(r"min\.insync\.replicas=1,?", "", described)


def normalize(tool: tuple[int, str]) -> tuple[int, str]:
    status, text = tool
    for pattern, replacement in _OWN:
        text = pattern.sub(replacement, text)
    return status, re.sub(r" +$", "", re.sub(r"[ \t]+", " ", text), flags=re.M)


def test_kafkas_operator_tools_print_the_same_and_abort_an_open_transaction(
        brokers: tuple[Peer, Peer], java_programs: JavaPrograms) -> None:
    t = unique("tools")
    (kafka, kafka_lso), (exactly, exactly_lso) = both(brokers, operator_tools(java_programs, t))
    assert (kafka_lso, exactly_lso) == (6, 6), "the ABORT marker at 5 moved the LSO past the open transaction"
    kafka[0] = (kafka[0][0], without_kafka_4s_topic_fields(kafka[0][1]))
    # after the abort, Exactly's producer is fenced (epoch 1, no sequence at it yet); Kafka's
    # marker leaves the producer's epoch and sequence as they were (docs/kafka-clients.md)
    header = "ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset\n"
    assert kafka.pop() == (0, header + "<pid> 0 <epoch> 3 <time> None\n")
    assert exactly.pop() == (0, header + "<pid> 1 <epoch> -1 <time> None\n")
    assert exactly == kafka


def word_count(java: JavaPrograms, tmp_path: Path, t: str) -> Callable[[Peer], str]:
    def run(peer: Peer) -> str:
        create_topics(peer, {t + "-in": (3, {}), t + "-out": (1, {})})
        producer = Producer(peer.config(**{"enable.idempotence": True}))
        for i in range(60):
            producer.produce(t + "-in", ("apple", "banana", "cherry")[i % 3].encode(), key=b"%d" % i)
        assert producer.flush(30) == 0
        done = java.run("StreamsWordCount", peer.bootstrap, t + "-in", t + "-out", t, str(tmp_path / peer.name),
                        "3", "20", "120", timeout=150)
        assert done.returncode == 0, f"{peer.name}: {done.stdout[-2000:]}{done.stderr[-5000:]}"
        return done.stdout.strip().splitlines()[-1]
    return run


def test_kafka_streams_exactly_once_v2_counts_exactly_once(brokers: tuple[Peer, Peer], java_programs: JavaPrograms,
                                                          tmp_path: Path) -> None:
    kafka, exactly = both(brokers, word_count(java_programs, tmp_path, unique("streams")))
    assert kafka == exactly == "COUNTS {apple=20, banana=20, cherry=20}"


def kip848_consumer(java: JavaPrograms, t: str) -> Callable[[Peer], list[tuple[int, str]]]:
    """The Java console consumer with ``group.protocol=consumer`` (KIP-848) reads a topic
    through a group; then kafka-consumer-groups lists the group's type and describes its
    committed offsets."""
    def run(peer: Peer) -> list[tuple[int, str]]:
        create_topics(peer, {t: (4, {})})
        producer = Producer({"bootstrap.servers": peer.bootstrap})
        for i in range(20):
            producer.produce(t, str(i).encode(), partition=i % 4)
        assert producer.flush(30) == 0
        group = ["--bootstrap-server", peer.bootstrap, "--group", t + "-g"]
        done = java.run("KafkaTools", TOOLS + "consumer.ConsoleConsumer", *group, "--topic", t, "--from-beginning",
                        "--max-messages", "20", "--command-property", "group.protocol=consumer", "---",
                        TOOLS + "consumer.group.ConsumerGroupCommand", *group, "--describe", "---",
                        TOOLS + "consumer.group.ConsumerGroupCommand", "--bootstrap-server", peer.bootstrap,
                        "--list", "--type")
        assert done.returncode == 0, done.stderr[-3000:]
        consumed, described, listed = tool_outputs(done.stdout)
        lines = [line for line in listed[1].splitlines() if line.startswith(t + "-g ") or line.startswith("GROUP")]
        return [(consumed[0], " ".join(sorted(consumed[1].split()))), normalize(described),
                (listed[0], re.sub(r" +", " ", "\n".join(lines)))]
    return run


def test_the_java_consumer_with_the_consumer_group_protocol_reads_alike(
        brokers: tuple[Peer, Peer], java_programs: JavaPrograms) -> None:
    kafka, exactly = both(brokers, kip848_consumer(java_programs, unique("kip848")))
    assert exactly == kafka
    assert exactly[0] == (0, " ".join(sorted(str(i) for i in range(20))))
    assert "Consumer" in exactly[2][1]

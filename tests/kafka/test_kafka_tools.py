"""Kafka's CLI tools (``kafka-tools``' main classes, the ``bin/kafka-*.sh`` scripts' own)
against Exactly and against Apache Kafka, each broker's tools in one JVM
(``KafkaTools.java``): kafka-topics, kafka-configs, kafka-acls, kafka-transactions,
kafka-consumer-groups, kafka-delete-records, kafka-log-dirs, kafka-get-offsets,
kafka-features, kafka-producer-perf-test and kafka-consumer-perf-test. Each tool's
output is checked for what an operator reads in it, and compared between the brokers;
docs/kafka-clients.md's table lists the tools and what differs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.kafka.differential import Peer, unique
from tests.kafka.real_kafka import JavaPrograms
from tests.kafka.test_java_clients import (TOOLS, both, normalize, tool_outputs, transaction_held_open,
                                           wait_for_markers, without_kafka_4s_topic_fields)

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(240)]

#: records the perf tools write and read
PERF_RECORDS = 500


def commit(peer: Peer, group: str, topic: str, partition: int, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": group, "broker.address.family": "v4"})
    consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    consumer.close()


def open_transaction(peer: Peer, transactional_id: str, topic: str, partition: int) -> Producer:
    """A confluent-kafka producer with a transaction left open on ``topic``/``partition``
    (the caller keeps it alive)."""
    producer = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": transactional_id,
                         "broker.address.family": "v4"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", key=b"k", partition=partition)
    assert producer.flush(30) == 0
    return producer


def kafka_tools(java: JavaPrograms, t: str, tmp_path: Path) -> Callable[[Peer], list[tuple[int, str]]]:
    """Runs every tool on one broker: ``t`` (2 partitions, a committed transaction and an
    open one on partition 0, group ``t-g`` at offset 2 there) is the tools' topic, ``t-new``
    the one kafka-topics makes, ``t-perf`` the perf tools'."""
    def run(peer: Peer) -> list[tuple[int, str]]:
        transaction_held_open(peer, t)
        wait_for_markers(peer, t, 3)
        commit(peer, t + "-g2", t, 1, 0)
        held = open_transaction(peer, t + "-tx2", t, 1)
        offsets = tmp_path / f"{peer.name}-delete-records.json"
        offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": t, "partition": 0, "offset": 1}]}))
        server = ["--bootstrap-server", peer.bootstrap]
        new, perf = t + "-new", t + "-perf"
        # (an ACL's --list comes several tools after its --add and --remove: Kafka's broker
        # learns of the change from its controller a moment after the command answers)
        runs = [
            ["TopicCommand", *server, "--create", "--topic", new, "--partitions", "2", "--replication-factor", "1"],
            ["AclCommand", *server, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", new],
            ["TopicCommand", *server, "--alter", "--topic", new, "--partitions", "3"],
            ["TopicCommand", *server, "--list", "--topic", new],
            ["TopicCommand", *server, "--describe", "--topic", new],
            ["ConfigCommand", *server, "--alter", "--entity-type", "topics", "--entity-name", new,
             "--add-config", "retention.ms=3600000,cleanup.policy=compact"],
            ["ConfigCommand", *server, "--alter", "--entity-type", "topics", "--entity-name", new,
             "--delete-config", "cleanup.policy"],
            ["ConfigCommand", *server, "--describe", "--entity-type", "topics", "--entity-name", new],
            ["ConfigCommand", *server, "--describe", "--entity-type", "brokers", "--entity-name", "1"],
            ["AclCommand", *server, "--list", "--topic", new],
            ["AclCommand", *server, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
             "--topic", new, "--force"],
            ["TransactionsCommand", *server, "list", "--transactional-id-pattern", re.escape(t) + ".*"],
            ["TransactionsCommand", *server, "describe", "--transactional-id", t + "-tx2"],
            ["TransactionsCommand", *server, "describe-producers", "--topic", t, "--partition", "1"],
            ["TransactionsCommand", *server, "find-hanging", "--broker-id", "1", "--topic", t],
            ["TransactionsCommand", *server, "abort", "--topic", t, "--partition", "0", "--start-offset", "3"],
            ["TransactionsCommand", *server, "forceTerminateTransaction", "--transactionalId", t + "-tx2"],
            ["TransactionsCommand", *server, "describe", "--transactional-id", t + "-tx2"],
            ["AclCommand", *server, "--list", "--topic", new],
            ["consumer.group.ConsumerGroupCommand", *server, "--list"],
            ["consumer.group.ConsumerGroupCommand", *server, "--describe", "--group", t + "-g"],
            ["consumer.group.ConsumerGroupCommand", *server, "--reset-offsets", "--group", t + "-g", "--topic", t,
             "--to-earliest", "--execute"],
            ["consumer.group.ConsumerGroupCommand", *server, "--delete-offsets", "--group", t + "-g", "--topic", t],
            ["consumer.group.ConsumerGroupCommand", *server, "--delete", "--group", t + "-g2"],
            ["DeleteRecordsCommand", *server, "--offset-json-file", str(offsets)],
            ["GetOffsetShell", *server, "--topic", t],
            ["GetOffsetShell", *server, "--topic", t, "--time", "-2"],
            ["LogDirsCommand", *server, "--describe", "--topic-list", t],
            ["FeatureCommand", *server, "describe"],
            ["ProducerPerformance", "--topic", perf, "--num-records", str(PERF_RECORDS), "--record-size", "100",
             "--throughput", "-1", "--producer-props", f"bootstrap.servers={peer.bootstrap}", "acks=all"],
            ["ConsumerPerformance", *server, "--topic", perf, "--messages", str(PERF_RECORDS)],
        ]
        done = java.run("KafkaTools", *[arg for run in runs for arg in ["---", TOOLS + run[0], *run[1:]]][1:],
                        timeout=200)
        assert done.returncode == 0, done.stderr[-3000:]
        del held  # fenced by forceTerminateTransaction
        outputs = tool_outputs(done.stdout)
        # ours, in order (the real Kafka's other groups are other tests')
        status, listed = outputs[GROUPS_LISTED]
        outputs[GROUPS_LISTED] = status, "".join(sorted(line for line in listed.splitlines(True) if line.startswith(t)))
        return [normalize((status, text.replace(t, "<t>"))) for status, text in outputs]
    return run


#: what differs between two runs of a tool, on any broker: producer ids (the real Kafka
#: serves the whole session), a transaction's duration, the features' epoch (Kafka's: an
#: offset of its metadata log), the perf tools' figures, the data directory
_RUN = [(re.compile(r"(?m)^(<t>-tx2?) (\d+) \d+ "), r"\1 \2 <pid> "),
        (re.compile(r"(?m)^1 (<t>-tx2) \d+ "), r"1 \1 <pid> "),
        (re.compile(r"<time> \d+ "), "<time> <duration> "),
        (re.compile(r'"logDir":"[^"]+"'), '"logDir":"<dir>"'),
        (re.compile(r"Epoch: \S+"), "Epoch: <epoch>"),
        (re.compile(r"(?m)^(\d+ records sent, ).*$"), r"\1<figures>"),
        (re.compile(r"(?m)^[\d-]+ [\d:]+, [\d-]+ [\d:]+, ([\d.]+), [\d.]+, (\d+), .*$"),
         r"<start>, <end>, \1, <MB.sec>, \2, <figures>")]


#: the first words of the tables whose rows come in a hash map's order
TABLE_HEADERS = ("TransactionalId ", "GROUP ", "TOPIC ")


def same_on_any_run(tool: tuple[int, str]) -> tuple[int, str]:
    """A tool's output without what differs between runs, its rows in order
    (kafka-transactions list, kafka-consumer-groups --reset-offsets and --delete-offsets,
    and kafka-log-dirs print them in a hash map's order)."""
    status, text = tool
    for pattern, replacement in _RUN:
        text = pattern.sub(replacement, text)
    lines = text.split("\n")
    header = next((i + 1 for i, line in enumerate(lines) if line.startswith(TABLE_HEADERS)), None)
    if header is not None:
        lines[header:-1] = sorted(lines[header:-1])
    for i, line in enumerate(lines):
        if line.startswith('{"brokers"'):
            dirs = json.loads(line)
            for broker in dirs["brokers"]:
                for directory in broker["logDirs"]:
                    directory["partitions"].sort(key=lambda p: p["partition"])
            lines[i] = json.dumps(dirs, separators=(",", ":"))
    return status, "\n".join(lines)


#: the tools' output on Exactly (normalized), in the order :func:`kafka_tools` runs them
EXPECTED = [
    "Created topic <t>-new.\n",
    "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=<t>-new, patternType=LITERAL)`:\n"
    " (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n",
    "",
    "<t>-new\n",
    "Topic: <t>-new TopicId: <id> PartitionCount: 3 ReplicationFactor: 1 Configs:\n"
    + "".join(f" Topic: <t>-new Partition: {p} Leader: 1 Replicas: 1 Isr: 1 Elr: LastKnownElr:\n"
              for p in range(3)),
    "Completed updating config for topic <t>-new.\n",
    "Completed updating config for topic <t>-new.\n",
    "Dynamic configs for topic <t>-new are:\n"
    " retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}\n",
    "Dynamic configs for broker 1 are:\n",
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=<t>-new, patternType=LITERAL)`:\n"
    " (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n",
    "",
    "TransactionalId Coordinator ProducerId TransactionState\n<t>-tx 1 <pid> Ongoing\n<t>-tx2 1 <pid> Ongoing\n",
    "CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState TransactionTimeoutMs "
    "CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions\n"
    "1 <t>-tx2 <pid> 0 Ongoing 60000 <time> <duration> <t>-1\n",
    "ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset\n"
    "<pid> 0 <epoch> 0 <time> 0\n",
    "Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration(min)\n",
    "",
    "",
    "CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState TransactionTimeoutMs "
    "CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions\n"
    "1 <t>-tx2 <pid> 2 Empty 30000 None None\n",
    "",
    "<t>-g\n<t>-g2\n",
    "\nGROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
    "<t>-g <t> 0 2 6 4 - - -\n",
    "\nGROUP TOPIC PARTITION NEW-OFFSET\n<t>-g <t> 0 0\n<t>-g <t> 1 0\n",
    "Request succeeded for deleting offsets from group <t>-g.\n\n"
    "TOPIC PARTITION STATUS\n<t> 0 Successful\n<t> 1 Successful\n",
    "Deletion of requested consumer groups ('<t>-g2') was successful.\n",
    "Executing records delete operation\nRecords delete operation completed:\npartition: <t>-0 low_watermark: 1\n",
    "<t>:0:6\n<t>:1:2\n",
    "<t>:0:1\n<t>:1:0\n",
    "Querying brokers for log directories information\nReceived log directory information from brokers 1\n"
    '{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"<t>-0","size":314,"offsetLag":0,'
    '"isFuture":false},{"partition":"<t>-1","size":151,"offsetLag":0,"isFuture":false}],"error":null,'
    '"logDir":"<dir>"}]}],"version":1}\n',
    "".join(f"Feature: {name} SupportedMinVersion: {low} SupportedMaxVersion: {high} FinalizedVersionLevel: {high} "
            "Epoch: <epoch>\n" for name, low, high in (("group.version", 0, 1),
                                                       ("metadata.version", "3.3-IV3", "4.4-IV2"),
                                                       ("transaction.version", 0, 2))),
    "Option --producer-props has been deprecated and will be removed in a future version. Use --command-property "
    "instead.\n500 records sent, <figures>\n",
    "Warning: --messages is deprecated. Use --num-records instead.\n"
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n<start>, <end>, 0.0477, <MB.sec>, 500, <figures>\n",
]
DESCRIBE_TOPIC, GROUPS_LISTED, FEATURES = 4, 19, 28


def test_kafkas_cli_tools_print_the_same_on_exactly_as_on_kafka(brokers: tuple[Peer, Peer],
                                                                java_programs: JavaPrograms, tmp_path: Path) -> None:
    kafka, exactly = (list(map(same_on_any_run, outputs))
                      for outputs in both(brokers, kafka_tools(java_programs, unique("cli"), tmp_path)))
    assert all(status == 0 for status, _ in exactly + kafka), (exactly, kafka)
    assert [text for _, text in exactly] == EXPECTED
    # what Kafka 4 prints beyond Exactly: its cluster-wide min.insync.replicas; and the
    # features Exactly does not have (KIP-966's ELR, KRaft, share and Streams groups)
    kafka[DESCRIBE_TOPIC] = normalize((0, without_kafka_4s_topic_fields(kafka[DESCRIBE_TOPIC][1])))
    kafkas_only = [line for line in kafka[FEATURES][1].splitlines(True) if line not in exactly[FEATURES][1]]
    assert [line.split()[1] for line in kafkas_only] == ["eligible.leader.replicas.version", "kraft.version",
                                                         "share.version", "streams.version"]
    kafka[FEATURES] = (kafka[FEATURES][0], "".join(line for line in kafka[FEATURES][1].splitlines(True)
                                                   if line not in kafkas_only))
    assert exactly == kafka

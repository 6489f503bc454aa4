"""Kafka's Java client and tools over SASL_SSL (SCRAM-SHA-512, the CA's PEM as the Java
truststore) against Exactly with Kafka's authorizer on: an admin (a super user) creates
the topics and grants alice what a transactional application needs with kafka-topics and
kafka-acls (``--command-config``); alice's idempotent producer, consume-transform-produce
transactions and read_committed consumer (``JavaClients.java``) do exactly what they do
on PLAINTEXT; kafka-transactions describes her transactional id to the admin and to her,
and what she was not granted she is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from tests.kafka.real_kafka import JavaPrograms
from tests.kafka.test_java_client import EXPECTED
from tests.kafka.test_java_clients import TOOLS, normalize, tool_outputs
from tests.sasl_support import ListenersBroker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
#: alice's steps of JavaClients.java, and what they print on any broker
APPLICATION = ["idempotent producer", "consume-transform-produce", "read_committed"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ListenersBroker]:
    with ListenersBroker(tmp_path / "data", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                         **{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                            "super.users": "User:admin"}) as served:
        for user, password in USERS.items():
            served.add_user(user, password)
        yield served


def client_properties(broker: ListenersBroker, user: str, directory: Path) -> str:
    """A ``--command-config`` file: SASL_SSL as ``user``, trusting the broker's CA."""
    path = directory / f"{user}.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{USERS[user]}";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={broker.ca}\n")
    return str(path)


def tools(java: JavaPrograms, *runs: list[str]) -> list[tuple[int, str]]:
    done = java.run("KafkaTools", *[arg for run in runs for arg in ["---", TOOLS + run[0], *run[1:]]][1:],
                    timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return [normalize(tool) for tool in tool_outputs(done.stdout)]


def test_a_transactional_java_application_and_the_tools_over_sasl_ssl_with_acls(
        broker: ListenersBroker, java_programs: JavaPrograms, tmp_path: Path) -> None:
    admin, alice = (client_properties(broker, user, tmp_path) for user in USERS)
    server = ["--bootstrap-server", f"127.0.0.1:{broker.port('SASL_SSL')}"]
    as_admin, as_alice = [*server, "--command-config", admin], [*server, "--command-config", alice]
    granted = tools(java_programs,
                    ["TopicCommand", *as_admin, "--create", "--topic", "app-in", "--partitions", "2"],
                    ["TopicCommand", *as_admin, "--create", "--topic", "app-out", "--partitions", "2"],
                    ["AclCommand", *as_admin, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                     "--operation", "Write", "--operation", "Describe", "--topic", "app-",
                     "--resource-pattern-type", "prefixed"],
                    ["AclCommand", *as_admin, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                     "--group", "app-group"],
                    ["AclCommand", *as_admin, "--add", "--allow-principal", "User:alice", "--operation", "Write",
                     "--operation", "Describe", "--transactional-id", "app-tx"])
    assert [status for status, _ in granted] == [0] * 5, granted
    assert granted[0][1] == "Created topic app-in.\n"

    done = java_programs.run("JavaClients", f"127.0.0.1:{broker.port('SASL_SSL')}", "app", alice,
                             ",".join(APPLICATION), timeout=150)
    assert done.returncode == 0, done.stderr[-5000:]
    assert done.stdout.splitlines() == [line for line in EXPECTED if line.split(":")[0] in APPLICATION]

    described = tools(java_programs,
                      ["TransactionsCommand", *as_admin, "describe", "--transactional-id", "app-tx"],
                      ["TransactionsCommand", *as_alice, "describe", "--transactional-id", "app-tx"],
                      ["TransactionsCommand", *as_admin, "list"],
                      ["AclCommand", *as_admin, "--list", "--principal", "User:alice"],
                      ["AclCommand", *as_alice, "--list"],
                      ["TopicCommand", *as_alice, "--create", "--topic", "other", "--partitions", "1"])
    header = ("CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState TransactionTimeoutMs "
              "CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions\n")
    assert described[0][0] == described[1][0] == 0
    # (the epoch: bumped by every EndTxn with transaction.version 2)
    assert re.fullmatch(re.escape(header) + r"1 app-tx 1 \d+ CompleteCommit 60000 <time> \d+\n", described[0][1])
    assert described[1][1].rsplit(" ", 1)[0] == described[0][1].rsplit(" ", 1)[0], "alice may describe her id"
    assert described[2] == (0, "TransactionalId Coordinator ProducerId TransactionState\napp-tx 1 1 CompleteCommit\n")
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in described[3][1]
    # refused: listing ACLs (Describe on the cluster), creating a topic (Create); the
    # message is the broker's error_message (Exactly's own words, docs/kafka-clients.md)
    assert described[4][0] == 1
    assert described[4][1].startswith("Error while executing ACL command: org.apache.kafka.common.errors."
                                      "ClusterAuthorizationException: not authorized: CLUSTER 'kafka-cluster'")
    assert described[5] == (1, "Error while executing topic command : not authorized: TOPIC 'other'\n")

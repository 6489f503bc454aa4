"""Transactions on Apache Kafka and on Exactly through raw requests, answers compared
field by field: commit and abort, the LSO and the aborted transactions a read_committed
fetch gets, DescribeTransactions / ListTransactions / DescribeProducers, fencing by a
new instance, the timeout, TxnOffsetCommit with ``require_stable`` and KIP-447's
generation fencing. Requests go at Kafka 3's versions (EndTxn v3): Kafka 4 keeps its
epoch per transaction for them; KIP-890 part 2 (EndTxn v5, Produce v12) is compared in
tests/kafka/test_transactions_v2.py."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LIST_TRANSACTIONS,
    OFFSET_FETCH,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    Normalizer,
    Peer,
    compared,
    create_topics,
    fetch,
    init_producer_id,
    list_offset,
    plain,
    produce,
    retry,
    subscription,
    unique,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
SETTLED = ("Empty", "Ongoing", "CompleteCommit", "CompleteAbort")


class Producer:
    """A transactional producer of raw requests, every answer kept (normalized) by step."""

    def __init__(self, peer: Peer, topic: str, transactional_id: str, normalize: Normalizer,
                 steps: dict[str, Any]) -> None:
        self.peer, self.topic, self.transactional_id = peer, topic, transactional_id
        self.normalize, self.steps = normalize, steps
        self.connection = peer.connection()
        self.sequences: dict[int, int] = {}
        self.pid = self.epoch = -1

    def ask(self, step: str, api: int, version: int, body: dict) -> dict:
        answer = retry(lambda: plain(self.connection.request(api, version, body)))
        self.steps[step] = self.normalize(answer)
        return answer

    def init(self, step: str, timeout_ms: int = 60_000) -> dict:
        """InitProducerId, asked again while it answers CONCURRENT_TRANSACTIONS (Kafka's
        answer while it aborts the transaction the new instance fences: pinned in
        test_a_new_instance_gets_its_epoch_at_once_on_exactly)."""
        def answered() -> dict | None:
            answer = init_producer_id(self.connection, self.transactional_id, timeout_ms)
            return None if answer["error_code"] == 51 else answer
        answer = eventually(answered, 30, "an answer other than CONCURRENT_TRANSACTIONS", interval=0.05)
        self.steps[step] = self.normalize(answer)
        if answer["error_code"] == 0:
            self.pid, self.epoch = answer["producer_id"], answer["producer_epoch"]
            self.sequences.clear()
        return answer

    def add(self, step: str, *partitions: int, epoch: int | None = None, topic: str | None = None) -> dict:
        return self.ask(step, ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": self.transactional_id, "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch if epoch is None else epoch,
            "v3_and_below_topics": [{"name": topic or self.topic, "partitions": list(partitions)}]})

    def send(self, step: str, partition: int, count: int = 2, epoch: int | None = None) -> None:
        sequence = self.sequences.get(partition, 0)
        batch = encode_batch([SimpleRecord(b"v%d" % i, key=b"k") for i in range(count)], producer_id=self.pid,
                             producer_epoch=self.epoch if epoch is None else epoch, base_sequence=sequence,
                             transactional=True)
        answer = produce(self.connection, self.topic, partition, batch, transactional_id=self.transactional_id)
        answer.pop("log_append_time")
        if answer["error_code"] == 0:
            self.sequences[partition] = sequence + count
        self.steps[step] = self.normalize(answer)

    def end(self, step: str, commit: bool, epoch: int | None = None) -> dict:
        answer = self.ask(step, END_TXN, 3, {"transactional_id": self.transactional_id, "producer_id": self.pid,
                                             "producer_epoch": self.epoch if epoch is None else epoch,
                                             "committed": commit})
        self.settle()
        return answer

    def settle(self) -> None:
        """Wait until the transaction is past its Prepare state: Kafka answers EndTxn
        before its markers are written (pinned in
        test_end_txn_answers_once_the_markers_are_durable_on_exactly)."""
        wait_for(lambda: self.describe(self.transactional_id)["transaction_state"] in SETTLED, "markers written")

    def describe(self, *transactional_ids: str) -> dict:
        answer = plain(self.connection.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(transactional_ids)}))
        return answer["transaction_states"][0]

    def describe_step(self, step: str) -> None:
        self.steps[step] = self.normalize(plain(self.connection.request(
            DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [self.transactional_id, self.transactional_id + "-none"]})))


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """:func:`~tests.waiting.eventually` as the scenarios here name it: what first."""
    eventually(condition, timeout, what, interval=0.02)


def commit_abort_and_fencing(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (2, {})})
    normalize, steps = Normalizer(), {}
    p = Producer(peer, t, t + "-tx", normalize, steps)
    p.init("init")
    p.send("produce before AddPartitionsToTxn", 0)
    p.add("add", 0, 1, 5)
    p.add("add the real ones", 0, 1)
    p.send("produce 0", 0)
    p.send("produce 1", 1)
    p.describe_step("described open")
    steps["read committed, open"] = fetch(peer, normalize, t, isolation_level=1)
    steps["LSO, open"] = normalize(list_offset(p.connection, t, -1, isolation_level=1))
    p.ask("listed", LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [p.pid],
                                           "duration_filter": -1})
    p.ask("producers", DESCRIBE_PRODUCERS, 0, {"topics": [{"name": t, "partition_indexes": [0, 1, 5]}]})
    p.end("commit", True)
    p.describe_step("described committed")
    p.end("commit again", True)
    p.end("abort after commit", False)
    p.add("add again", 0)
    p.send("produce 2", 0)
    p.end("abort", False)
    steps["read committed"] = fetch(peer, normalize, t, isolation_level=1)
    steps["read uncommitted"] = fetch(peer, normalize, t, isolation_level=0)
    p.add("add, to be fenced", 0)
    p.send("produce, to be fenced", 0)
    old_epoch = p.epoch
    zombie = Producer(peer, t, p.transactional_id, normalize, steps)
    zombie.init("a new instance")
    zombie.settle()
    p.describe_step("described after fencing")
    p.send("zombie's produce", 0, epoch=old_epoch)
    p.add("zombie's add", 1, epoch=old_epoch)
    p.end("zombie's commit", True, epoch=old_epoch)
    p.ask("zombie's epoch bump", INIT_PRODUCER_ID, 4, {"transactional_id": p.transactional_id,
                                                       "transaction_timeout": 60_000, "producer_id": p.pid,
                                                       "producer_epoch": old_epoch})
    steps["read committed after fencing"] = fetch(peer, normalize, t, isolation_level=1)
    p.ask("producers after", DESCRIBE_PRODUCERS, 0, {"topics": [{"name": t, "partition_indexes": [0]}]})
    return steps


def test_commit_abort_lso_and_fencing_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, commit_abort_and_fencing, "txn")
    assert exactly == kafka


def timeouts_and_mistakes(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {})})
    normalize, steps = Normalizer(), {}
    p = Producer(peer, t, t + "-short", normalize, steps)
    p.init("init", timeout_ms=1000)
    p.add("add", 0)
    p.send("produce", 0)
    wait_for(lambda: p.describe(p.transactional_id)["transaction_state"] == "CompleteAbort",
             "the timed-out transaction to be aborted")
    p.describe_step("described after the timeout")
    p.send("produce after the timeout", 0)
    p.end("commit after the timeout", True)
    steps["read committed"] = fetch(peer, normalize, t, isolation_level=1)
    for step, timeout_ms in (("timeout above the maximum", 1_000_000_000), ("timeout 0", 0)):
        p.init(step, timeout_ms)
    p.ask("unknown id", END_TXN, 3, {"transactional_id": t + "-none", "producer_id": 1, "producer_epoch": 0,
                                     "committed": True})
    p.init("again")
    p.add("unknown topic", 0, topic=t + "-missing")
    p.ask("empty id", INIT_PRODUCER_ID, 4, {"transactional_id": "", "transaction_timeout": 60_000,
                                            "producer_id": -1, "producer_epoch": -1})
    return steps


def test_timeouts_and_mistakes_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, timeouts_and_mistakes, "txn-timeout")
    assert exactly == kafka


def offsets_in_transactions(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (2, {})})
    normalize, steps = Normalizer(), {}
    p = Producer(peer, t, t + "-tx", normalize, steps)
    group = t + "-g"
    member = Producer(peer, t, "", normalize, {})  # its connection, for the group's requests

    def join(member_id: str) -> dict:
        return plain(member.connection.request(JOIN_GROUP, 5, {
            "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription(t)}]}))
    joined = retry(lambda: join(join("")["member_id"]))
    member_id, generation = joined["member_id"], joined["generation_id"]
    retry(lambda: plain(member.connection.request(SYNC_GROUP, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "assignments": [{"member_id": member_id, "assignment": b""}]})))
    p.init("init")
    p.ask("add offsets", ADD_OFFSETS_TO_TXN, 3, {"transactional_id": p.transactional_id, "producer_id": p.pid,
                                                 "producer_epoch": p.epoch, "group_id": group})

    def commit(step: str, generation_id: int, member: str, offset: int = 5) -> None:
        p.ask(step, TXN_OFFSET_COMMIT, 3, {
            "transactional_id": p.transactional_id, "group_id": group, "producer_id": p.pid,
            "producer_epoch": p.epoch, "generation_id": generation_id, "member_id": member, "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})
    commit("an old generation", generation - 1, member_id)
    commit("an unknown member", generation, "someone-else")
    commit("no generation", -1, "", offset=4)
    commit("the member's generation", generation, member_id)

    def offsets(step: str, stable: bool, partitions: list[int] | None = [0, 1]) -> None:
        p.ask(step, OFFSET_FETCH, 7, {"group_id": group, "require_stable": stable, "topics": None if partitions is None
                                      else [{"name": t, "partition_indexes": partitions}]})
    offsets("require_stable, pending", True)
    offsets("not stable, pending", False)
    offsets("all, require_stable, pending", True, None)
    p.end("commit", True)
    offsets("require_stable, committed", True)
    return steps


def test_offsets_in_a_transaction_require_stable_and_generation_fencing_answer_alike(
        brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, offsets_in_transactions, "txn-offsets")
    assert exactly == kafka


def test_end_txn_answers_once_the_markers_are_durable_on_exactly(brokers: tuple[Peer, Peer]) -> None:
    """Kafka answers EndTxn once PrepareCommit is written and writes the markers after,
    so a client that asks at once may still find PrepareCommit, the LSO before the
    transaction and the committed offsets unstable; Exactly answers once every marker
    and the offsets are durable (docs/kafka-clients.md: "A commit is reported only when
    it happened"). Both end in the same state."""
    def after_commit(peer: Peer, t: str) -> Callable[[], tuple]:
        create_topics(peer, {t: (1, {})})
        p = Producer(peer, t, t + "-tx", Normalizer(), {})
        p.init("init")
        p.add("add", 0)
        p.send("produce", 0)
        p.ask("add offsets", ADD_OFFSETS_TO_TXN, 3, {"transactional_id": p.transactional_id, "producer_id": p.pid,
                                                     "producer_epoch": p.epoch, "group_id": t})
        p.ask("offsets", TXN_OFFSET_COMMIT, 3, {
            "transactional_id": p.transactional_id, "group_id": t, "producer_id": p.pid, "producer_epoch": p.epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [{"name": t, "partitions": [
                {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert plain(p.connection.request(END_TXN, 3, {"transactional_id": p.transactional_id, "producer_id": p.pid,
                                                       "producer_epoch": p.epoch, "committed": True}))["error_code"] == 0
        return lambda: (p.describe(p.transactional_id)["transaction_state"],
                        list_offset(p.connection, t, -1, isolation_level=1)["offset"],
                        plain(p.connection.request(OFFSET_FETCH, 7, {"group_id": t, "require_stable": True, "topics": [
                            {"name": t, "partition_indexes": [0]}]}))["topics"][0]["partitions"][0]["error_code"])
    t = unique("end-txn")
    kafka, exactly = brokers
    settled = ("CompleteCommit", 3, 0)  # the record and its marker below the LSO; offsets stable
    assert after_commit(exactly, t)() == settled
    kafka_state = after_commit(kafka, t)
    wait_for(lambda: kafka_state() == settled, "Kafka's markers")


def test_a_new_instance_gets_its_epoch_at_once_on_exactly(brokers: tuple[Peer, Peer]) -> None:
    """A new instance's InitProducerId while the old one has a transaction open: Kafka
    starts aborting it and answers CONCURRENT_TRANSACTIONS, which the client retries until
    the abort is complete; Exactly completes the abort first and answers the new epoch.
    Either way the old epoch is fenced and the open transaction aborted."""
    def first_answer(peer: Peer, t: str) -> int:
        create_topics(peer, {t: (1, {})})
        old = Producer(peer, t, t + "-tx", Normalizer(), {})
        old.init("init")
        old.add("add", 0)
        old.send("produce", 0)
        return init_producer_id(peer.connection(), old.transactional_id)["error_code"]
    t = unique("new-instance")
    kafka, exactly = brokers
    assert (first_answer(kafka, t), first_answer(exactly, t)) == (51, 0)

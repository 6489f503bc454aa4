"""Produce to Apache Kafka and to Exactly, raw batches through the wire, answers and the
fetched log compared field by field: idempotent duplicates, gaps, out-of-order
sequences and epoch fencing; oversized records, keyless records on a compacted topic,
timestamps against ``message.timestamp.*``, LogAppendTime; and where Exactly must
answer otherwise, the pinned difference."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    Normalizer,
    Peer,
    compared,
    create_topics,
    fetch,
    init_producer_id,
    list_offset,
    produce,
    unique,
)

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]
HOUR = 3_600_000


def answered(normalize: Normalizer, answer: dict[str, Any]) -> dict[str, Any]:
    """A partition's Produce answer, normalized, with whether a LogAppendTime came back."""
    answer = dict(answer)
    answer["log_append_time given"] = answer.get("log_append_time") not in (None, -1)
    return normalize(answer)


def idempotence(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {})})
    normalize, steps = Normalizer(), {}
    connection = peer.connection()
    init = init_producer_id(connection, None)
    steps["init"] = normalize(init)
    pid, epoch, now = init["producer_id"], init["producer_epoch"], int(time.time() * 1000)

    def batch(sequence: int, producer_epoch: int = epoch, count: int = 3) -> bytes:
        return encode_batch([SimpleRecord(b"v%d" % (sequence + i), key=b"k", timestamp=now) for i in range(count)],
                            producer_id=pid, producer_epoch=producer_epoch, base_sequence=sequence)
    for step, sequence, producer_epoch in [("first", 0, epoch), ("retried", 0, epoch), ("gap", 5, epoch),
                                           ("next", 3, epoch), ("retried again", 0, epoch), ("next epoch", 0, epoch + 1),
                                           ("older epoch", 6, epoch), ("next epoch at 4", 4, epoch + 2),
                                           ("after the sixth", 3, epoch + 1)]:
        answer = produce(connection, t, 0, batch(sequence, producer_epoch))
        answer.pop("log_append_time")  # a retry's: pinned in test_a_retried_batch_answers_no_log_append_time
        steps[step] = normalize(answer)
    steps["fetched"] = fetch(peer, normalize, t)
    return steps


def test_idempotent_duplicates_gaps_and_epochs_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, idempotence, "idempotence")
    assert exactly == kafka


def refusals(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (1, {}), t + "-compact": (1, {"cleanup.policy": "compact"}),
                         t + "-small": (1, {"max.message.bytes": "200"}),
                         t + "-appended": (1, {"message.timestamp.type": "LogAppendTime"}),
                         t + "-bounded": (1, {"message.timestamp.before.max.ms": str(HOUR),
                                              "message.timestamp.after.max.ms": str(HOUR)})})
    normalize, steps = Normalizer(), {}
    connection = peer.connection()
    now = int(time.time() * 1000)

    def records(*timestamps: int, key: bytes | None = b"k") -> bytes:
        return encode_batch([SimpleRecord(b"v", key=key, timestamp=ts) for ts in timestamps])
    for step, topic, batch, partition, acks in [
            ("plain", t, records(now, key=None), 0, -1),
            ("acks=1", t, records(now), 0, 1),
            ("acks=2", t, records(now), 0, 2),
            ("too large", t + "-small", encode_batch([SimpleRecord(b"x" * 300, key=b"k", timestamp=now)]), 0, -1),
            ("keyless on a compacted topic", t + "-compact",
             encode_batch([SimpleRecord(b"x", key=b"a", timestamp=now), SimpleRecord(b"y", timestamp=now),
                           SimpleRecord(b"z", timestamp=now)]), 0, -1),
            ("log append time", t + "-appended", records(1000), 0, -1),
            ("too old", t + "-bounded", records(now, 1000), 0, -1),
            ("too new", t + "-bounded", records(now + 2 * HOUR), 0, -1),
            ("within bounds", t + "-bounded", records(now - HOUR // 2, now + HOUR // 2), 0, -1),
            ("unknown topic", t + "-missing", records(now), 0, -1),
            ("unknown partition", t, records(now), 7, -1)]:
        steps[step] = answered(normalize, produce(connection, topic, partition, batch, acks))
    steps["why too old"] = re.sub(r"\d{10,}", "<now>", produce(connection, t + "-bounded", 0, records(now, 1000))
                                  ["record_errors"][0]["batch_index_error_message"])
    steps["fetched"] = fetch(peer, normalize, t)
    appended = fetch(peer, normalize, t + "-appended")
    steps["fetched log append time"] = {**appended, "batches": [
        {k: v for k, v in b.items() if k != "records"} for b in appended["batches"]]}
    steps["offsets"] = {what: normalize(list_offset(connection, t + "-bounded", ts))
                        for what, ts in (("latest", -1), ("earliest", -2), ("an hour on", now + HOUR))}
    return steps


def test_records_refused_for_what_they_hold_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, refusals, "refusals")
    assert exactly == kafka


# -- pinned differences ------------------------------------------------------------------------------


def test_a_producer_id_the_broker_never_handed_out_is_refused(brokers: tuple[Peer, Peer]) -> None:
    """Kafka takes any producer id on a partition; Exactly refuses one it did not hand
    out (INVALID_PRODUCER_ID_MAPPING), so no client can squat the id it hands out next."""
    def answer(peer: Peer, t: str) -> int:
        create_topics(peer, {t: (1, {})})
        squatted = encode_batch([SimpleRecord(b"v")], producer_id=10**12, producer_epoch=0, base_sequence=0)
        return produce(peer.connection(), t, 0, squatted)["error_code"]
    t = unique("squatter")
    kafka, exactly = brokers
    assert (answer(kafka, t), answer(exactly, t)) == (0, 49)


def test_a_producer_new_to_a_partition_starts_at_sequence_zero_on_exactly(brokers: tuple[Peer, Peer]) -> None:
    """Kafka (2.5+) takes a producer's first batch on a partition at any sequence;
    Exactly answers UNKNOWN_PRODUCER_ID unless it is 0: a mid-stream sequence could be
    a retry whose original was written before the producer's state was lost."""
    def answer(peer: Peer, t: str) -> int:
        create_topics(peer, {t: (1, {})})
        connection = peer.connection()
        init = init_producer_id(connection, None)
        mid_stream = encode_batch([SimpleRecord(b"v")], producer_id=init["producer_id"],
                                  producer_epoch=init["producer_epoch"], base_sequence=7)
        return produce(connection, t, 0, mid_stream)["error_code"]
    t = unique("mid-stream")
    kafka, exactly = brokers
    assert (answer(kafka, t), answer(exactly, t)) == (0, 59)


def test_a_retried_batch_answers_no_log_append_time(brokers: tuple[Peer, Peer]) -> None:
    """Kafka answers a duplicate with the original batch's max timestamp as its
    LogAppendTime even on a CreateTime topic (librdkafka then reports it as the
    delivery's timestamp); Exactly answers -1 there, as the protocol says for
    CreateTime, since its producer state keeps no timestamps of past batches."""
    def answers(peer: Peer, t: str) -> list[int | None]:
        create_topics(peer, {t: (1, {})})
        connection = peer.connection()
        init = init_producer_id(connection, None)
        batch = encode_batch([SimpleRecord(b"v", timestamp=1_700_000_000_000)], producer_id=init["producer_id"],
                             producer_epoch=init["producer_epoch"], base_sequence=0)
        return [produce(connection, t, 0, batch)["log_append_time"] for _ in range(2)]
    t = unique("retried")
    kafka, exactly = brokers
    assert answers(kafka, t) == [None, 1_700_000_000_000]
    assert answers(exactly, t) == [None, None]

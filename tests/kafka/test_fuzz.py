"""tests/kafka_fuzz.py's requests -- a valid one of every API and version Exactly serves,
then hostile mutants of it -- sent to Apache Kafka and to Exactly, the outcome of each
frame compared: answered, or the connection closed (an acks=0 Produce: silent). Kafka
is the judge of which frames deserve an answer. Three kinds of frame may differ, each
pinned: a length or count below -1 where the schema allows null (Kafka reads any
negative -- a compact field's varint of 2^31 or more too -- as null; Exactly closes the
connection); ACL requests with UNKNOWN or
undefined enum codes (Kafka fails to parse them and closes; Exactly answers
INVALID_REQUEST); and an AlterConfigs of two resources of unknown types with one name,
which Kafka never answers (it throws building the answer). Both brokers serve a real
client afterwards."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from tests.kafka.differential import (
    ALTER_CONFIGS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    INIT_PRODUCER_ID,
    Peer,
    unique,
)
from tests.kafka_fuzz import SILENCE_S, Fuzzer, RequestWriter, mutants, served
from tests.kafka_support import read_to_end

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(240)]
SEED = 20261206
#: mutants per request (tests/test_kafka_fuzz.py and bench/fuzz_kafka.py send more, to Exactly alone)
MUTANTS = 2
#: ACL APIs: Kafka refuses to parse a filter or creation with an UNKNOWN (0) or undefined code
ACL_APIS = {DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS}
#: a length or count Kafka reads as a negative int other than -1: "... length -2", or an
#: unsigned varint of 2^31 or more (a compact field's), which wraps negative in Java's int
BELOW_NULL = re.compile(r": (length|count) (-(?!1\b)\d+|\d{10,})$")


def outcomes(peer: Peer) -> list[tuple[int, int, str, str]]:
    """(API, version, what the frame is, its outcome) of every frame, in order."""
    rng = random.Random(SEED)
    writer, fuzzer = RequestWriter(rng), Fuzzer(peer.port, read_timeout=10)
    found = []
    for api, version in served():
        request = writer.request(api, version, correlation_id=rng.randrange(2**31))
        silence = SILENCE_S if request.silent else None
        frames = list(mutants(request, rng))
        for what, frame in [("valid", request.frame), *rng.sample(frames, min(MUTANTS, len(frames)))]:
            found.append((api, version, what, fuzzer.send(api, version, frame, silence)[0]))
    fuzzer.close()
    return found


def serves_a_client(peer: Peer, topic: str) -> bool:
    from confluent_kafka import Producer

    producer = Producer(peer.config(**{"enable.idempotence": True, "message.timeout.ms": 30_000}))
    for i in range(3):
        producer.produce(topic, b"after %d" % i, partition=0)
    return producer.flush(30) == 0 and read_to_end(peer.config(**{"group.id": topic}), topic, 1) == [
        b"after 0", b"after 1", b"after 2"]


def test_hostile_frames_are_answered_or_refused_as_kafka_does(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = (outcomes(peer) for peer in brokers)
    assert [frame[:3] for frame in kafka] == [frame[:3] for frame in exactly], "the same frames, in the same order"
    differing = [(api, version, what, k, e) for (api, version, what, k), (_, _, _, e) in zip(kafka, exactly) if k != e]
    pinned, other = [], []
    for frame in differing:
        (pinned if explained(*frame) else other).append(frame)
    assert not other, f"frames answered otherwise than Kafka answers them: {other}"
    assert len(kafka) > 300 and pinned, "the sweep sent what it should"
    topic = unique("after-fuzz")
    assert all(serves_a_client(peer, topic) for peer in brokers)


def explained(api: int, version: int, what: str, kafka: str, exactly: str) -> bool:
    """Whether a frame's two outcomes are one of the differences docs/kafka-clients.md lists."""
    if (kafka, exactly) == ("answered", "closed"):
        return BELOW_NULL.search(what) is not None
    if (kafka, exactly) == ("closed", "answered"):
        return api in ACL_APIS or (api, version) == (INIT_PRODUCER_ID, 6)
    if (kafka, exactly) == ("silent", "answered"):
        # Kafka 4.4 throws building the answer to two resources of unknown types with one
        # name (IllegalStateException: duplicate key ConfigResource(type=UNKNOWN)) and never answers
        return api == ALTER_CONFIGS
    return False


def test_a_nullable_length_below_minus_one_is_null_to_kafka_and_closes_on_exactly(
        brokers: tuple[Peer, Peer]) -> None:
    """Kafka's generated readers take any negative length of a nullable field as null;
    Exactly takes -1 only, as Kafka's clients write it, and closes the connection on
    anything else (tests/kafka_fuzz.py's mutants; docs/kafka-clients.md, Limits)."""
    def outcome(peer: Peer) -> str:
        writer = RequestWriter(random.Random(SEED))
        # ListGroups v0 is empty: its frame is the header alone, the client id a nullable string
        frame = bytearray(writer.request(16, 0, correlation_id=7).frame)
        frame[12:14] = (-2).to_bytes(2, "big", signed=True)  # the client id's length
        frame = frame[:14]
        frame[:4] = (len(frame) - 4).to_bytes(4, "big")
        fuzzer = Fuzzer(peer.port)
        try:
            return fuzzer.send(16, 0, bytes(frame))[0]
        finally:
            fuzzer.close()
    kafka, exactly = brokers
    assert (outcome(kafka), outcome(exactly)) == ("answered", "closed")


def test_an_acl_filter_of_unknown_codes_closes_kafkas_connection_and_is_invalid_request_on_exactly(
        brokers: tuple[Peer, Peer]) -> None:
    body: dict[str, Any] = {"resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
                            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    kafka, exactly = brokers
    with pytest.raises(ConnectionError):
        kafka.connection().request(DESCRIBE_ACLS, 3, body)
    assert exactly.request(DESCRIBE_ACLS, 3, body)["error_code"] == 42

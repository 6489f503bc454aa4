"""The source's option parsing and offset-range arithmetic, without a SparkSession:
Spark's Kafka connector's meanings and error wording, and Spark's splitting and
rate-limiting rules as properties."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from exactly.app.spark.partition_reader import OffsetRange
from exactly.app.spark.source import divide, from_json, input_partitions, rate_limit, to_json
from exactly.app.spark.source_options import (
    Earliest, Latest, SpecificOffsets, Subscription, Timestamps, parse_options)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_are_sparks_except_read_committed() -> None:
    batch = parse_options({**BOOT, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription == Subscription("subscribe", topics=("a", "b"))
    assert (batch.starting, batch.ending) == (Earliest(), Latest())
    assert batch.read_committed and not batch.include_headers and batch.fail_on_data_loss
    assert parse_options({**BOOT, "subscribe": "a"}, streaming=True).starting == Latest()


def test_option_names_are_case_insensitive_and_kafka_options_reach_the_consumer() -> None:
    options = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "t-.*", "INCLUDEHEADERS": "true",
                             "kafka.client.id": "me", "kafka.isolation.level": "read_uncommitted"},
                            streaming=False)
    assert options.subscription.matches("t-1") and not options.subscription.matches("xt-1")
    assert options.include_headers and not options.read_committed
    assert options.client_config() == {"client.id": "me", "bootstrap.servers": "h:1"}


def test_offsets_json_and_timestamps_follow_sparks_precedence() -> None:
    specific = parse_options({**BOOT, "assign": '{"t":[1,0]}', "startingOffsets": '{"t":{"0":5,"1":-2}}'},
                             streaming=False)
    assert specific.subscription.partitions == (("t", 0), ("t", 1))
    assert specific.starting == SpecificOffsets({("t", 0): 5, ("t", 1): -2})
    by_time = parse_options({**BOOT, "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "1000",
                             "startingOffsetsByTimestampStrategy": "latest"}, streaming=True)
    assert by_time.starting == Timestamps(everywhere=1000, missing="latest", option="startingTimestamp")


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t"}, "Option 'kafka.bootstrap.servers' must be specified"),
    ({**BOOT}, "One of the following options must be specified for Kafka source"),
    ({**BOOT, "subscribe": "t", "subscribePattern": "t"}, "Only one of the following options can be specified"),
    ({**BOOT, "subscribe": " , "}, "No topics to subscribe to as specified value for option 'subscribe'"),
    ({**BOOT, "subscribePattern": "("}, "Invalid value '\\(' for option 'subscribePattern'"),
    ({**BOOT, "assign": "t:0"}, "No topicpartitions to assign as specified value for option 'assign'"),
    ({**BOOT, "assign": '{"t":["0"]}'}, "Invalid value .* for option 'assign'"),
    ({**BOOT, "subscribe": "t", "startingOffsets": "first"}, "Invalid value 'first' for option 'startingOffsets'"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "Invalid offset -3 for t-0"),
    ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, "ending offset can't be earliest"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets for t-0 can't be latest"),
    ({**BOOT, "subscribe": "t", "startingTimestamp": "yesterday"}, "Invalid value 'yesterday' for option"),
    ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger': must be a positive"),
    ({**BOOT, "subscribe": "t", "minPartitions": "x"}, "'minPartitions': must be a positive integer"),
    ({**BOOT, "subscribe": "t", "includeHeaders": "yes"}, "'includeHeaders': expected true or false"),
    ({**BOOT, "subscribe": "t", "kafka.isolation.level": "none"}, "'kafka.isolation.level': expected one of"),
    ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "Kafka option 'auto.offset.reset' is not"),
    ({**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "5"}, "'minOffsetsPerTrigger' is not supported"),
])
def test_misuse_is_refused_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_options(options, streaming=False)


def test_a_stream_refuses_ending_offsets() -> None:
    with pytest.raises(ValueError, match="Option 'endingTimestamp' is not valid in streaming queries"):
        parse_options({**BOOT, "subscribe": "t", "endingTimestamp": "5"}, streaming=True)


def test_offsets_round_trip_through_sparks_json_form() -> None:
    offsets = {("b", 10): 7, ("a", 0): 3, ("a", 2): 0}
    assert to_json(offsets) == {"a": {"0": 3, "2": 0}, "b": {"10": 7}}
    assert from_json(to_json(offsets)) == offsets


ranges = st.builds(lambda p, start, size: OffsetRange("t", p, start, start + size),
                   st.integers(0, 5), st.integers(0, 10**6), st.integers(0, 10**5))


@given(ranges, st.integers(1, 50))
def test_divide_covers_a_range_with_near_equal_consecutive_parts(rng: OffsetRange, parts: int) -> None:
    pieces = divide(rng, parts)
    assert len(pieces) == parts and pieces[0].start == rng.start and pieces[-1].end == rng.end
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
    assert max(p.size for p in pieces) - min(p.size for p in pieces) <= 1


def test_splitting_follows_sparks_offset_range_calculator() -> None:
    options = parse_options({**BOOT, "subscribe": "t", "maxRecordsPerPartition": "4"}, streaming=False)
    planned = [p.value for p in input_partitions([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)], options)]
    assert [(r.start, r.end) for r in planned] == [(0, 3), (3, 6), (6, 10)]  # the empty range is dropped
    options = parse_options({**BOOT, "subscribe": "t", "minPartitions": "4"}, streaming=False)
    planned = [p.value for p in input_partitions([OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)], options)]
    assert [(r.partition, r.size) for r in planned] == [(0, 22), (0, 22), (0, 23), (0, 23), (1, 10)]
    options = parse_options({**BOOT, "subscribe": "t", "minPartitions": "10"}, streaming=False)
    planned = [p.value for p in input_partitions([OffsetRange("t", 0, 0, 25), OffsetRange("t", 1, 0, 75)], options)]
    assert [r.partition for r in planned].count(0) == 3  # 2.5 parts rounds half up, as Java's Math.round


@given(st.dictionaries(st.tuples(st.just("t"), st.integers(0, 20)),
                       st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)), min_size=1),
       st.integers(1, 10**5))
def test_rate_limit_shares_the_limit_without_passing_the_end(spans: dict, limit: int) -> None:
    begin = {tp: start for tp, (start, _) in spans.items()}
    until = {tp: start + size for tp, (start, size) in spans.items()}
    limited = rate_limit(limit, begin, until)
    assert all(begin[tp] <= limited[tp] <= until[tp] for tp in until)
    taken = sum(limited[tp] - begin[tp] for tp in until)
    assert taken <= limit + len(until)  # at most one extra per starved partition, as Spark
    if sum(until[tp] - begin[tp] for tp in until) <= limit:
        assert limited == until
    assert all(limited[tp] > begin[tp] for tp in until if until[tp] > begin[tp])  # nobody starves

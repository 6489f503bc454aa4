"""The record browser's read models (exactly/app/engine/record_browser.py) over a real log:
pages forward and back, the text filter and how far it looked, each record whole with
its batch, and its read_committed state as the records view decides it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.engine import read_models, record_browser
from exactly.storage.compression import Compression
from exactly.storage.errors import OffsetOutOfRangeError
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import SMALL_INTERNAL_TOPICS

T0 = 1_700_000_000_000
_topics = itertools.count()


@pytest.fixture
def log(broker: Broker) -> Broker:
    """``t-0``: 0-9 plain (key k<i>, value plain-<i>, header n=<i>, time T0 + i s), 10-11 one
    gzip batch, 12 committed in tx1 (marker 13), 14 aborted in tx2 (marker 15), 16 open in tx3."""
    broker.create_topic("t", 1)
    for i in range(10):
        broker.produce("t", 0, encode_batch([SimpleRecord(b"plain-%d" % i, key=b"k%d" % i, headers=(("n", b"%d" % i),),
                                                          timestamp=T0 + 1000 * i)]))
    broker.produce("t", 0, encode_batch([SimpleRecord(b"zip-a", timestamp=T0), SimpleRecord(b"zip-b", timestamp=T0)],
                                        compression=Compression.GZIP))
    for txn_id, value, commit in (("tx1", b"paid", True), ("tx2", b"refund", False), ("tx3", b"pending", None)):
        producer = broker.producer(transactional_id=txn_id)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", value, key=b"txn", partition=0).get(timeout=10)
        if commit is True:
            producer.commit_transaction()
        elif commit is False:
            producer.abort_transaction()
    return broker


def _page(broker: Broker, **kwargs) -> dict:
    return broker.engine.call(record_browser.page, broker.engine, "t", 0, **kwargs)


def _offsets(page: dict) -> list[int]:
    return [r["offset"] for r in page["records"]]


def test_the_newest_page_shows_each_records_read_committed_state_as_the_records_view(log):
    page = _page(log, limit=5)
    assert _offsets(page) == [12, 13, 14, 15, 16]
    assert (page["scanned_from"], page["scanned_to"], page["high_watermark"], page["last_stable_offset"]) == (12, 17, 17, 16)
    view = log.engine.call(read_models.records, log.engine, "t", 0, 12, limit=5)["records"]
    assert [(r["status"], r["marker"]) for r in page["records"]] == [(r["status"], r["marker"]) for r in view]
    assert [r["status"] for r in page["records"]] == ["committed", "marker", "aborted", "marker", "open"]


def test_pages_forward_and_back(log):
    first = _page(log, start=0, limit=4)
    assert _offsets(first) == [0, 1, 2, 3] and first["scanned_to"] == 4
    second = _page(log, start=first["scanned_to"], limit=4)
    assert _offsets(second) == [4, 5, 6, 7]
    back = _page(log, before=second["scanned_from"], limit=4)
    assert _offsets(back) == [0, 1, 2, 3] and back["scanned_from"] == 0
    assert _offsets(_page(log, before=12, limit=5)) == [7, 8, 9, 10, 11]
    assert _offsets(_page(log, start=17)) == []  # at the high watermark: nothing yet (the live tail's case)


def test_records_are_whole_with_headers_and_their_batch(log):
    row = _page(log, start=3, limit=1)["records"][0]
    assert (row["key"], row["value"], row["headers"], row["timestamp"]) == (b"k3", b"plain-3", [("n", b"3")], T0 + 3000)
    zipped = _page(log, start=10, limit=2)["records"]
    assert [r["value"] for r in zipped] == [b"zip-a", b"zip-b"]
    assert zipped[1]["batch"]["compression"] == "gzip"
    assert (zipped[1]["batch"]["base_offset"], zipped[1]["batch"]["last_offset"], zipped[1]["batch"]["record_count"]) == (10, 11, 2)


def test_the_filter_matches_key_or_value_text_case_insensitively_and_says_how_far_it_looked(log):
    assert _offsets(_page(log, text="PLAIN-7")) == [7]
    assert _offsets(_page(log, text="k3")) == [3]
    forward = _page(log, start=0, limit=2, text="plain")
    assert _offsets(forward) == [0, 1] and forward["scanned_to"] == 2
    newest = _page(log, limit=2, text="plain")
    assert _offsets(newest) == [8, 9] and newest["scanned_from"] == 8
    nothing = _page(log, start=0, text="no such text")
    assert _offsets(nothing) == [] and (nothing["scanned_from"], nothing["scanned_to"]) == (0, 17)


def test_the_read_committed_view_shows_only_what_such_a_consumer_receives(log):
    page = _page(log, start=0, read_committed=True)
    assert _offsets(page) == list(range(13))  # no marker (13, 15), not aborted 14, not open 16
    assert _offsets(_page(log, limit=3, read_committed=True)) == [10, 11, 12]
    assert _offsets(_page(log, start=13, read_committed=True)) == []
    past = _page(log, start=16, read_committed=True)  # where the live tail of this view waits
    assert (_offsets(past), past["scanned_to"], past["upper_offset"]) == ([], 16, 16)  # no further than the LSO


def test_a_filtered_scan_stops_at_the_scan_limit(log, monkeypatch):
    monkeypatch.setattr(record_browser, "SCAN_LIMIT", 5)
    page = _page(log, start=0, text="zip")
    assert _offsets(page) == [] and page["scanned_to"] == 5  # looked at 0-4 only; the next page goes on
    assert _offsets(_page(log, start=page["scanned_to"] + 5, text="zip")) == [10, 11]


def test_the_detail_of_an_aborted_record_names_its_transaction_and_txnindex_entry(log):
    aborted = log.engine.call(record_browser.record, log.engine, "t", 0, 14)
    assert aborted["status"] == "aborted" and aborted["transactional_id"] == "tx2"
    assert aborted["aborted_range"] == {"first_offset": 14, "last_offset": 15}  # up to its marker, as Kafka indexes it
    assert aborted["batch"]["transactional"] and not aborted["batch"]["control"]
    marker = log.engine.call(record_browser.record, log.engine, "t", 0, 15)
    assert (marker["status"], marker["marker"], marker["batch"]["control"]) == ("marker", "ABORT", True)
    assert aborted["marker_offset"] == 15
    committed = log.engine.call(record_browser.record, log.engine, "t", 0, 12)
    assert (committed["status"], committed["transactional_id"], committed["marker_offset"]) == ("committed", "tx1", 13)
    opened = log.engine.call(record_browser.record, log.engine, "t", 0, 16)
    assert (opened["status"], opened["transactional_id"], opened["aborted_range"], opened["marker_offset"]) == (
        "open", "tx3", None, None)
    plain = log.engine.call(record_browser.record, log.engine, "t", 0, 2)
    view = log.engine.call(read_models.records, log.engine, "t", 0, 2, limit=1)["records"][0]
    assert (plain["status"], plain["transactional_id"], plain["batch"]["producer_id"]) == (view["status"], None, -1)


@pytest.mark.parametrize("call", [
    lambda b: b.engine.call(record_browser.page, b.engine, "t", 0, start=18),
    lambda b: b.engine.call(record_browser.page, b.engine, "t", 0, before=99),
    lambda b: b.engine.call(record_browser.record, b.engine, "t", 0, 17),
])
def test_offsets_outside_the_log_are_offset_out_of_range(log, call):
    with pytest.raises(OffsetOutOfRangeError):
        call(log)


# -- paging is a partition of the log ---------------------------------------------------------------

VALUES = (b"apple", b"Banana", b"cherry", b"\x00\xffbin")
batches = st.lists(st.tuples(st.lists(st.sampled_from(VALUES), min_size=1, max_size=4),
                             st.sampled_from(("plain", "gzip", "committed", "aborted"))), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory) -> Broker:
    with Broker(tmp_path_factory.mktemp("paging") / "data", **SMALL_INTERNAL_TOPICS) as broker:
        yield broker


def _fill(broker: Broker, topic: str, spec) -> None:
    broker.create_topic(topic, 1)
    for values, kind in spec:
        records = [SimpleRecord(v, key=b"key-%s" % v[:1]) for v in values]
        if kind in ("plain", "gzip"):
            broker.produce(topic, 0, encode_batch(records, compression=Compression.GZIP if kind == "gzip"
                                                   else Compression.NONE))
            continue
        producer = broker.producer(transactional_id=f"{topic}-tx")
        producer.init_transactions()
        producer.begin_transaction()
        for r in records:
            producer.send(topic, r.value, key=r.key, partition=0)
        if kind == "committed":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
        producer.close()


def _expected(everything: list[dict], text: str, read_committed: bool) -> list[int]:
    """The offsets a page walk must visit, from the records view's states."""
    return [r["offset"] for r in everything
            if not (read_committed and r["status"] in ("marker", "aborted"))
            and (not text or (r["status"] != "marker" and any(text.lower().encode() in (d or b"").lower()
                                                               for d in (r["key"], r["value"]))))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=batches, limit=st.integers(1, 6), text=st.sampled_from(("", "an", "CHERRY", "key-a", "none")),
       read_committed=st.booleans())
def test_pages_forward_and_back_visit_every_matching_record_once_in_order(shared_broker, spec, limit, text,
                                                                          read_committed):
    broker = shared_broker
    topic = f"p{next(_topics)}"
    _fill(broker, topic, spec)
    everything = broker.engine.call(record_browser.page, broker.engine, topic, 0, start=0, limit=500)["records"]
    matching = _expected(everything, text, read_committed)
    hw = broker.engine.partitions.log(topic, 0).high_watermark
    view = {"limit": limit, "text": text, "read_committed": read_committed}

    forward, start = [], 0
    while start < hw:
        page = broker.engine.call(record_browser.page, broker.engine, topic, 0, start=start, **view)
        assert len(page["records"]) <= limit and page["scanned_to"] > start
        forward += _offsets(page)
        start = page["scanned_to"]
    backward, before = [], hw
    while before > 0:
        page = broker.engine.call(record_browser.page, broker.engine, topic, 0, before=before, **view)
        assert len(page["records"]) <= limit and page["scanned_from"] < before
        backward = _offsets(page) + backward
        before = page["scanned_from"]
    assert forward == backward == matching
    broker.delete_topic(topic)

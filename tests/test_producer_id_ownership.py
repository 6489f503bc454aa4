"""Producer ids belong to the broker: a batch may carry only an id the broker handed
out, on every face (Kafka's Produce, the HTTP records endpoint, the embedded API), so
no client can move producer-id allocation (an id near 2^63 broke it after a restart)
or take the id the coordinator hands out next (which wedged the transactional id
given it: its markers were refused for good). A marker refused anyway -- by data
from before these checks -- no longer leaves a transactional id stuck: the
operator's Abort forces the completion, and the console says why it was stuck."""

from __future__ import annotations

import logging
import re
from contextlib import closing
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.app.kafka.api import ApiKey
from exactly.storage.errors import InvalidProducerEpochError, InvalidProducerIdMappingError
from exactly.storage.filenames import PRODUCER_ID_BLOCK
from exactly.storage.record_batch import SimpleRecord
from exactly.storage.read_committed import read_records
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch
from tests.kafka_support import KafkaBroker, raw_connection
from tests.waiting import eventually
from tests.raw_txn import RawTxn, coordinator_call
from tests.storage_log import DurableLogs

pytestmark = pytest.mark.timeout(120)
NEAR_MAX = 2**63 - 10
INVALID_PRODUCER_ID_MAPPING = 49


def new_producer_id(broker: Broker) -> int:
    """InitProducerId without a transactional id (an idempotent producer's)."""
    return coordinator_call(broker, "init_producer_id", None, -1)[0]


def values(broker: Broker, topic: str) -> list[bytes]:
    """What a read_committed consumer reads from ``topic``-0."""
    r = broker.fetch(topic, 0, 0, isolation_level="read_committed")
    return [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def test_an_idempotent_batch_with_a_producer_id_never_handed_out_is_refused_on_every_face(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data") as kafka, closing(raw_connection(kafka.port)) as raw:
        broker = kafka.broker
        broker.create_topic("t", 1)
        with pytest.raises(InvalidProducerIdMappingError, match="never handed out"):  # embedded
            broker.produce("t", 0, data_batch([b"x"], producer_id=NEAR_MAX, epoch=0, sequence=0))
        wire = raw.request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 10_000,
                                               "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records":
                                                   data_batch([b"x"], producer_id=NEAR_MAX, epoch=0, sequence=0)}]}]})
        assert wire.responses[0].partition_responses[0].error_code == INVALID_PRODUCER_ID_MAPPING
        http = create_app(broker.engine, test_config={"TESTING": True}).test_client()
        answer = http.post(f"/v3/clusters/{broker.cluster_id}/topics/t/records", json={
            "partition_id": 0, "value": {"type": "STRING", "data": "x"},
            "producer_id": 2**63 - 1, "producer_epoch": 0, "sequence": 0})
        assert answer.status_code == 409 and answer.json["error_name"] == "INVALID_PRODUCER_ID_MAPPING", answer.json
        assert broker.list_offsets("t", 0, -1) == 0, "nothing was written"

        handed_out = new_producer_id(broker)  # what a well-behaved producer does first
        assert broker.produce("t", 0, data_batch([b"ok"], producer_id=handed_out, epoch=0, sequence=0)) == 0


def test_producer_ids_after_a_restart_come_from_the_broker_not_from_ids_clients_wrote(tmp_path: Path) -> None:
    """A log holding a client-made id near 2^63 -- accepted before ids were checked, here
    written as such a broker wrote it -- moves allocation neither with the producer-id
    block nor without it."""
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("t", 1)
        first = new_producer_id(broker)
    with DurableLogs(data) as logs:  # what an unchecked broker appended for a client
        logs.produce("t", 0, data_batch([b"stray"], producer_id=NEAR_MAX, epoch=0, sequence=0))
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        after_restart = new_producer_id(broker)
        txn = RawTxn(broker, "after-restart")
        txn.send("t", 0, b"committed")
        txn.commit()
        assert first < after_restart < 2**32 and first < txn.pid < 2**32
    (data / PRODUCER_ID_BLOCK).unlink()  # lost: the logs witness the idempotent ids, an impossible one is ignored
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        without_block = new_producer_id(broker)
        assert max(after_restart, txn.pid) < without_block < 2**32
        assert values(broker, "t") == [b"stray", b"committed"]


def test_a_batch_with_the_next_producer_id_cannot_wedge_the_transactional_id_given_it(broker: Broker) -> None:
    broker.create_topic("t", 1)
    next_id = new_producer_id(broker) + 1  # ids are handed out in order: anyone can guess the next
    with pytest.raises(InvalidProducerIdMappingError):
        broker.produce("t", 0, data_batch([b"squatter"], producer_id=next_id, epoch=5, sequence=0))
    txn = RawTxn(broker, "victim")
    assert txn.pid == next_id
    txn.send("t", 0, b"first")
    txn.abort()  # the ABORT marker is accepted: the partition never saw epoch 5
    txn.send("t", 0, b"second")
    txn.commit()
    assert values(broker, "t") == [b"second"]


def test_the_operators_abort_completes_a_transaction_whose_marker_a_partition_refuses(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A batch with the id the coordinator hands out next, at epoch 5, appended as a
    broker before these checks appended it. The transactional id given that id has its
    ABORT refused there; EndTxn waits, the console's Abort completes it (fencing the
    squatter there) and the console shows the refusal."""
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **{"exactly.jobs.enable": False}) as broker:
        broker.create_topic("t", 1)
        engine, tc = broker.engine, broker.engine.transactions.coordinator
        squatted = new_producer_id(broker) + 1
        engine.call(engine.partitions.log("t", 0).append_data,  # the storage layer takes any id
                    data_batch([b"squatter"], producer_id=squatted, epoch=5, sequence=0))
        txn = RawTxn(broker, "victim")
        assert txn.pid == squatted
        txn.add(("t", 0))
        with pytest.raises(InvalidProducerEpochError):  # the partition has seen epoch 5
            broker.produce("t", 0, txn.batch("t", 0, [SimpleRecord(b"lost")]))
        ending = engine.schedule(tc.end_txn, "victim", txn.pid, txn.epoch, False)
        eventually(lambda: "victim" in tc.last_refusal, 20, "the refusal")
        assert tc.describe("victim").state.display == "PrepareAbort"

        client = create_app(engine, test_config={"TESTING": True}).test_client()
        page = client.get("/transactions/victim").get_data(True)
        assert "marker refused" in page and "INVALID_PRODUCER_EPOCH" in page and "Force completion" in page
        with caplog.at_level(logging.WARNING, logger="exactly.coordinator.transaction_coordinator"):
            token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
            answer = client.post("/transactions/victim/abort", data={"csrf_token": token})
        assert answer.status_code in (204, 303)
        assert tc.describe("victim").state.display == "CompleteAbort"
        assert any("forces the PrepareAbort" in r.getMessage() for r in caplog.records)
        ending.result(10)  # EndTxn returns too, once the abort completed
        assert "INVALID_PRODUCER_EPOCH" in client.get("/transactions/victim").get_data(True)

        again = RawTxn(broker, "victim")  # the id is usable again: its epoch is above the squatter's
        assert again.epoch > 5
        again.send("t", 0, b"after")
        again.commit()
        assert values(broker, "t") == [b"squatter", b"after"]



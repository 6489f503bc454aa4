"""The scheduled jobs: each is a thin call into the engine, driven here by a FakeClock."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.engine.scheduler import start_scheduler
from exactly.storage.clock import FakeClock
from exactly.storage.errors import UnknownProducerIdError
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch, producer_id
from tests.raw_txn import RawTxn

DAY = 24 * 3600 * 1000
FROZEN = {"exactly.jobs.enable": False}


def test_idle_producers_expire_after_producer_id_expiration_ms(tmp_path: Path, clock: FakeClock) -> None:
    # frozen: the clock jumps a day with a transaction open, past its timeout
    config = {"producer.id.expiration.ms": DAY, **SMALL_INTERNAL_TOPICS, **FROZEN}
    with Broker(tmp_path / "d", clock=clock, **config) as broker:
        broker.create_topic("t", 1)
        idle = producer_id(broker)
        broker.produce("t", 0, data_batch([b"a"], idle, 0, 0, timestamp=clock.now_ms()))
        open_txn = RawTxn(broker, "open")
        open_txn.send("t", 0, b"open", timestamp=clock.now_ms())
        clock.advance(DAY - 1)
        assert broker.engine.call(broker.engine.jobs.expire_producer_ids) == 0, "not idle long enough"
        clock.advance(1)
        assert broker.engine.call(broker.engine.jobs.expire_producer_ids) == 1, "only the idle, non-transactional one"
        producers = broker.engine.partitions.log("t", 0).producer_state.producers
        assert set(producers) == {open_txn.pid}, "a producer with an open transaction is never expired"
        with pytest.raises(UnknownProducerIdError):
            broker.produce("t", 0, data_batch([b"b"], idle, 0, 1))  # its state is gone: no silent gap
        assert broker.produce("t", 0, data_batch([b"again"], idle, 0, 0)) == 2, "a fresh start is accepted"


def test_the_scheduler_runs_every_job_the_broker_needs(tmp_path: Path) -> None:
    with Broker(tmp_path / "d", **FROZEN) as broker:
        scheduler = start_scheduler(broker.engine, broker.mirror)
        try:
            jobs = {job.id for job in scheduler.get_jobs()}
        finally:
            scheduler.shutdown(wait=True)
    assert {"abort-timed-out-transactions", "expire-transactional-ids", "expire-producer-ids",
            "producer-snapshots", "log-retention", "log-cleaner", "offset-checkpoints",
            "sqlite-mirror"} <= jobs

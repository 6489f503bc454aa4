"""The schema-derived fuzzer (``tests/kafka_fuzz.py``), a fast seeded subset, against a
broker in a process of its own (``python -m exactly serve``): every API and version
the listener serves answers a valid request (every handler's response built strictly
at every served version), and after rounds of hostile requests of all of them the
broker still serves a real client, its memory stays bounded, and a restart -- after a
SIGKILL or a clean stop -- reads back everything that was acknowledged.

The full sweep is ``bench/fuzz_kafka.py``. A failure names the seed;
``EXACTLY_FUZZ_SEED=<seed>`` replays it."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Iterator

import pytest

from tests.kafka_fuzz import Campaign, Fuzzer, RequestWriter, ServedBroker, served

pytestmark = pytest.mark.timeout(300)
SEED = int(os.environ.get("EXACTLY_FUZZ_SEED", "20261127"))
#: sampled mutants per request per round (the bench sends them all)
MUTANTS = 3
#: how far the broker's peak RSS may rise above what it started with
RSS_HEADROOM_KB = 200_000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ServedBroker]:
    served_broker = ServedBroker(tmp_path / "data")
    served_broker.start()
    yield served_broker
    if served_broker.alive:
        served_broker.stop(kill=True)


def test_every_served_api_and_version_answers_a_valid_request(broker: ServedBroker) -> None:
    """Drives every handler at every version it declares, so a response key that no
    version has (``exactly/app/kafka/wire.py``'s strict build) or a handler crash shows here."""
    rng = random.Random(SEED)
    writer, fuzzer = RequestWriter(rng), Fuzzer(broker.port)
    for api_key, version in served():
        for _ in range(3):  # three draws of values: nulls, empty and non-empty arrays
            fuzzer.valid(writer.request(api_key, version, correlation_id=rng.randrange(2**31)))
    fuzzer.close()
    assert broker.alive and not broker.errors(), f"seed {SEED}: {broker.errors()}"


def test_after_hostile_rounds_the_broker_serves_stays_bounded_and_recovers(broker: ServedBroker) -> None:
    campaign = Campaign(broker, SEED)
    campaign.round(MUTANTS, kill=True)
    campaign.round(MUTANTS, kill=False)
    closed = sum(t.outcomes["closed"] for t in campaign.fuzzer.tallies.values())
    assert closed > len(served()), "the mutants should mostly be refused"
    assert campaign.peak_kb - campaign.start_peak_kb < RSS_HEADROOM_KB, (
        f"seed {SEED}: peak RSS {campaign.peak_kb} KiB, from {campaign.start_peak_kb} KiB")

"""``kafka-features upgrade|downgrade --feature transaction.version=N`` (UpdateFeatures)
on Apache Kafka 4.4 and on Exactly: the tool prints the same for a downgrade, its dry
run, a refused upgrade and the upgrade back, and ``describe`` then shows the same level
-- each broker's epoch left out, but it moves on both."""

from __future__ import annotations

import re

import pytest

from tests.kafka.differential import Peer
from tests.kafka.real_kafka import run_tool
from tests.kafka.test_transactions_v2 import features_described

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = (
    ("downgrade", "--feature", "transaction.version=1", "--dry-run"),
    ("downgrade", "--feature", "transaction.version=1"),
    ("downgrade", "--feature", "transaction.version=2"),
    ("upgrade", "--feature", "transaction.version=3"),
    ("upgrade", "--feature", "transaction.version=2"),
)


def feature_command(peer: Peer, *args: str) -> tuple[int, str]:
    done = run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", peer.bootstrap, *args)
    # a refusal's reason is each controller's own words after Kafka's "Invalid update version" prefix
    first_line = (done.stdout.splitlines() or [""])[0]
    return done.returncode, re.sub(r"(Invalid update version \d+ for feature [\w.]+\.).*", r"\1", first_line)


def epochs(peer: Peer) -> set[str]:
    done = run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", peer.bootstrap, "describe")
    return set(re.findall(r"Epoch: (\d+)", done.stdout))


def test_kafka_features_upgrade_and_downgrade_print_the_same(brokers: tuple[Peer, Peer]) -> None:
    answers: dict[str, list] = {}
    for peer in brokers:
        before = epochs(peer)
        try:
            answers[peer.name] = [feature_command(peer, *step) for step in STEPS[:2]]
            answers[peer.name].append(features_described(peer)["transaction.version"])
            assert epochs(peer) != before, f"{peer.name}: the finalized features' epoch moves with a change"
            answers[peer.name] += [feature_command(peer, *step) for step in STEPS[2:]]
        finally:
            feature_command(peer, "upgrade", "--feature", "transaction.version=2")
    kafka, exactly = answers["kafka"], answers["exactly"]
    assert kafka[1] == (0, "transaction.version was downgraded to 1.")
    assert kafka[2]["FinalizedVersionLevel"] == "1"
    assert exactly == kafka
    for peer in brokers:
        assert features_described(peer)["transaction.version"]["FinalizedVersionLevel"] == "2"

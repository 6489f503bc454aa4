"""The online migration of a running group between the classic and the consumer protocol
(KIP-848), member by member, with real clients on Kafka 4.4 and on Exactly alike: the
scenario of tests/kip848_migration.py, whose expectations at each step -- the group's type
and state, its members' types, what DescribeGroups says -- are what Kafka 4.4 answers,
and whose transactional application copies its input exactly once through the migrations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kip848_migration
from tests.kafka.differential import Peer

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_running_group_migrates_both_ways_member_by_member_exactly_once(kafka_and_exactly: Peer,
                                                                          tmp_path: Path) -> None:
    kip848_migration.run(kafka_and_exactly, tmp_path)

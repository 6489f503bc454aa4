"""The features of this broker (KIP-584): what it supports and what it has finalized,
as ApiVersions v3+ reports them and Kafka's ``kafka-features describe`` shows them.

One table, as a single Kafka 4.4 node answers it (tests/kafka's fixture), with the
features Exactly implements:

=====================  =========  ==========================================================
feature                supported  finalized
=====================  =========  ==========================================================
``group.version``      0-1        :data:`GROUP_VERSION_LEVEL` (1: the KIP-848 consumer
                                  group protocol, ConsumerGroupHeartbeat)
``metadata.version``   7-33       33 (Kafka 4.4's latest; clients read nothing from it)
``transaction.version``  0-2      the ``transaction.version`` config (default 2)
=====================  =========  ==========================================================

``transaction.version`` 2 is KIP-890 part 2: a client that reads it finalized at 2
sends Produce v12, TxnOffsetCommit v5 and EndTxn v5 and no AddPartitionsToTxn or
AddOffsetsToTxn (the broker adds the partition, the group, on its side) and takes
the producer epoch EndTxn bumps. Pinned at 1 or 0 -- as ``kafka-storage format
--feature transaction.version=1`` pins a Kafka cluster -- clients use the earlier
protocol and the broker adds nothing implicitly (a Produce v12 is then verified
only, as v11). Kafka's other single-node features (``kraft.version``,
``share.version``, ``streams.version``, ``eligible.leader.replicas.version``) are
left out: they say a cluster has share groups, streams groups or a KRaft quorum,
which this broker does not.

The finalized features' epoch (``FinalizedFeaturesEpoch``) is, in Kafka, the offset of
the metadata record that last changed them; here it is the time this process
started, in ms: later starts (and a ``transaction.version`` changed by a restart) have
a larger one, and a client keeps the features of the largest epoch it has seen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
METADATA_VERSION = "metadata.version"

#: KIP-890 part 2's level: implicit partition and offsets adds, an epoch bump per EndTxn
TRANSACTION_VERSION_2 = 2
#: the transaction versions this broker supports (Kafka 4.4's: 0-2)
TRANSACTION_VERSIONS = range(0, 3)
#: ``group.version`` as finalized here: 1, the KIP-848 consumer group protocol
#: (ConsumerGroupHeartbeat, ConsumerGroupDescribe) is served
GROUP_VERSION_LEVEL = 1
#: Kafka 4.4's range of ``metadata.version`` (3.3-IV3 to 4.4-IV?), and the level its new node finalizes
METADATA_VERSIONS = range(7, 34)

#: FinalizedFeaturesEpoch: this process's start, in ms (see the module docstring)
FINALIZED_FEATURES_EPOCH = time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Feature:
    """One feature: the range of levels supported, and the level finalized (0: not
    finalized, left out of FinalizedFeatures as Kafka leaves it out)."""

    name: str
    min_version: int
    max_version: int
    finalized: int


def features(transaction_version: int) -> tuple[Feature, ...]:
    """Every feature, with ``transaction.version`` finalized at ``transaction_version``."""
    return (
        Feature(GROUP_VERSION, 0, 1, GROUP_VERSION_LEVEL),
        Feature(METADATA_VERSION, METADATA_VERSIONS.start, METADATA_VERSIONS.stop - 1, METADATA_VERSIONS.stop - 1),
        Feature(TRANSACTION_VERSION, TRANSACTION_VERSIONS.start, TRANSACTION_VERSIONS.stop - 1, transaction_version),
    )


def api_versions_fields(transaction_version: int, version: int) -> dict[str, Any]:
    """ApiVersions' feature fields at request ``version`` (none before v3). As Kafka's, v3
    leaves out features whose supported range starts at 0 (older clients read 0 as
    "not supported")."""
    if version < 3:
        return {}
    table = features(transaction_version)
    return {
        "supported_features": [{"name": f.name, "min_version": f.min_version, "max_version": f.max_version}
                               for f in table if version >= 4 or f.min_version > 0],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": f.name, "min_version_level": f.finalized, "max_version_level": f.finalized}
                               for f in table if f.finalized > 0],
    }


def implicit_add(transaction_version: int) -> bool:
    """Whether a Produce v12+ or TxnOffsetCommit v5+ adds its partition to the
    transaction (``transaction.version`` finalized at 2), or is only verified."""
    return transaction_version >= TRANSACTION_VERSION_2

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

``transaction.version`` is the one level UpdateFeatures changes (``kafka-features
upgrade|downgrade --feature transaction.version=N``, :func:`update_refusal` says what
Kafka's controller refuses); the change is a FeatureLevelRecord in
``__cluster_metadata`` (``cluster_metadata.py``), so it outlives a restart, and from then
on the ``transaction.version`` config -- the level a new cluster starts with, as
``kafka-storage format --feature`` gives it -- no longer applies. ``group.version`` and
``metadata.version`` stay at their one level here (an update to another is refused).

The finalized features' epoch (``FinalizedFeaturesEpoch``) is, in Kafka, the offset of
the metadata record that last changed them; here it is the time, in ms, of the last
change or of this process's start (:func:`next_epoch`): it grows with every change and
every restart, and a client keeps the features of the largest epoch it has seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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
METADATA_VERSION_LEVEL = METADATA_VERSIONS.stop - 1

#: UpdateFeatures' upgrade types (Kafka's ``FeatureUpdate.UpgradeType`` codes)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True)
class Feature:
    """One feature: the range of levels supported, and the level finalized (0: not
    finalized, left out of FinalizedFeatures as Kafka leaves it out)."""

    name: str
    min_version: int
    max_version: int
    finalized: int


def initial_levels(transaction_version: int) -> dict[str, int]:
    """The finalized levels before any UpdateFeatures: ``transaction.version`` from its config."""
    return {GROUP_VERSION: GROUP_VERSION_LEVEL, METADATA_VERSION: METADATA_VERSION_LEVEL,
            TRANSACTION_VERSION: transaction_version}


def features(levels: Mapping[str, int]) -> tuple[Feature, ...]:
    """Every feature this broker supports, finalized at ``levels``."""
    return (
        Feature(GROUP_VERSION, 0, 1, levels.get(GROUP_VERSION, 0)),
        Feature(METADATA_VERSION, METADATA_VERSIONS.start, METADATA_VERSIONS.stop - 1,
                levels.get(METADATA_VERSION, 0)),
        Feature(TRANSACTION_VERSION, TRANSACTION_VERSIONS.start, TRANSACTION_VERSIONS.stop - 1,
                levels.get(TRANSACTION_VERSION, 0)),
    )


def api_versions_fields(levels: Mapping[str, int], epoch: int, version: int) -> dict[str, Any]:
    """ApiVersions' feature fields at request ``version`` (none before v3). As Kafka's, v3
    leaves out features whose supported range starts at 0 (older clients read 0 as
    "not supported")."""
    if version < 3:
        return {}
    table = features(levels)
    return {
        "supported_features": [{"name": f.name, "min_version": f.min_version, "max_version": f.max_version}
                               for f in table if version >= 4 or f.min_version > 0],
        "finalized_features_epoch": epoch,
        "finalized_features": [{"name": f.name, "min_version_level": f.finalized, "max_version_level": f.finalized}
                               for f in table if f.finalized > 0],
    }


def update_refusal(name: str, level: int, upgrade_type: int, levels: Mapping[str, int]) -> str | None:
    """Why an UpdateFeatures may not set ``name`` to ``level`` (None: it may), in the
    order and words of Kafka's ``FeatureControlManager.updateFeature``: an unknown
    upgrade type, a level below 0 or outside what is supported, a downgrade asked as
    an upgrade or an upgrade asked as a downgrade. A feature this broker does not
    know may only be set to 0 (not finalized), as Kafka's controller allows."""
    current = levels.get(name, 0)
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        reason = "The controller does not support the given upgrade type."
    elif level < 0:
        reason = "A feature version cannot be less than 0."
    elif name == TRANSACTION_VERSION and level not in TRANSACTION_VERSIONS:
        reason = (f"Local controller only supports versions [{TRANSACTION_VERSIONS.start}-"
                  f"{TRANSACTION_VERSIONS.stop - 1}].")
    elif name in (GROUP_VERSION, METADATA_VERSION) and level != current:
        reason = f"This broker serves {name} {current} only."
    elif name not in (TRANSACTION_VERSION, GROUP_VERSION, METADATA_VERSION) and level != 0:
        reason = "Local controller does not support this feature."
    elif level < current and upgrade_type == UPGRADE:
        reason = ("Can't downgrade the version of this feature without setting the upgrade type to either "
                  "safe or unsafe downgrade.")
    elif level > current and upgrade_type != UPGRADE:
        reason = "Can't downgrade to a newer version."
    else:
        return None
    return f"Invalid update version {level} for feature {name}. {reason}"


def next_epoch(epoch: int, now_ms: int) -> int:
    """The finalized features' epoch after a change at ``now_ms``: larger than ``epoch``."""
    return max(epoch + 1, now_ms)


def implicit_add(transaction_version: int) -> bool:
    """Whether a Produce v12+ or TxnOffsetCommit v5+ adds its partition to the
    transaction (``transaction.version`` finalized at 2), or is only verified."""
    return transaction_version >= TRANSACTION_VERSION_2

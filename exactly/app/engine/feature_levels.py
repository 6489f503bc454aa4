"""The finalized feature levels (KIP-584) of this broker, and UpdateFeatures' changes of
them (``kafka-features upgrade|downgrade``), durable in ``__cluster_metadata``.

``exactly/coordinator/features.py`` has the table and the rules; this service holds
the levels in force -- those the ``transaction.version`` config starts a broker with,
then the last FeatureLevelRecord of each feature -- and the epoch ApiVersions reports
with them. A change is written (fsynced) before it applies and before it is answered,
as Kafka's controller commits a FeatureLevelRecord before it answers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from exactly.coordinator import cluster_metadata, features
from exactly.storage.clock import Clock
from exactly.storage.errors import InvalidUpdateVersionError

#: writes ``(key, value)`` records to ``__cluster_metadata``, durably (the engine's)
MetadataWriter = Callable[[list[tuple[bytes, bytes | None]]], Awaitable[None]]

log = logging.getLogger(__name__)


class FeatureLevels:
    """The finalized levels in force, and the one way to change them."""

    def __init__(self, transaction_version: int, clock: Clock, write_metadata: MetadataWriter) -> None:
        self._configured = transaction_version
        self._levels = features.initial_levels(transaction_version)
        self._clock = clock
        self._write_metadata = write_metadata
        #: FinalizedFeaturesEpoch: this process's start, then each change's time (ms)
        self.epoch = clock.now_ms()
        #: one change at a time: each is checked against the levels the last one left
        self._changes = asyncio.Lock()

    def load(self, image: cluster_metadata.MetadataImage) -> None:
        """Install the levels UpdateFeatures wrote (before the loop runs): they win over
        the config, which only gives a new broker its first level (as ``kafka-storage
        format --feature`` does)."""
        self._levels.update(image.feature_levels)
        if self.transaction_version != self._configured:
            log.warning("features: %s is %d, as UpdateFeatures last set it; the config's %d applies only to a "
                        "broker whose level was never changed", features.TRANSACTION_VERSION,
                        self.transaction_version, self._configured)

    @property
    def levels(self) -> dict[str, int]:
        """Each feature's finalized level (0: not finalized)."""
        return dict(self._levels)

    @property
    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` (2: KIP-890 part 2)."""
        return self._levels.get(features.TRANSACTION_VERSION, 0)

    async def update(self, updates: Iterable[tuple[str, int, int]], validate_only: bool = False) -> None:
        """UpdateFeatures: each ``(feature, level, upgrade type)`` checked against the
        levels in force (``features.update_refusal``); one refused refuses them all,
        nothing written (Kafka's controller: "The update failed for all features since
        the following feature had an error"); else, unless ``validate_only``, the
        FeatureLevelRecords are written, durably, and the levels and epoch change.

        :raise InvalidUpdateVersionError: the first refusal."""
        async with self._changes:
            wanted = list(updates)
            for name, level, upgrade_type in wanted:
                refusal = features.update_refusal(name, level, upgrade_type, self._levels)
                if refusal is not None:
                    raise InvalidUpdateVersionError(
                        f"The update failed for all features since the following feature had an error: {refusal}")
            if validate_only or not wanted:
                return
            await self._write_metadata([(cluster_metadata.encode_feature_key(name),
                                         cluster_metadata.encode_feature_value(name, level))
                                        for name, level, _ in wanted])
            for name, level, _ in wanted:
                log.info("features: %s finalized at %d (was %d)", name, level, self._levels.get(name, 0))
                self._levels[name] = level
            self.epoch = features.next_epoch(self.epoch, self._clock.now_ms())

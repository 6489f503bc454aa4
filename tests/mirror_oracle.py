"""The mirror's test oracle: the logs replayed into dictionaries by the mirror's own rules
(``exactly/coordinator/mirror.py``'s :class:`MirrorTarget`), compared with what the database
holds (:func:`read_state`). Test code, so it lives with the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from sqlalchemy import Table, select

from exactly.coordinator import cluster_metadata, offsets_log, transaction_log
from exactly.coordinator.mirror import (
    ACLS_TABLE,
    DERIVED_TABLES,
    FINISHED_TABLE,
    GROUPS_TABLE,
    OFFSETS_TABLE,
    PRODUCERS_TABLE,
    PROGRESS_TABLE,
    SCRAM_TABLE,
    TXN_IDS_TABLE,
    FETCH_MAX_BYTES,
    MirrorSource,
    Row,
    TopicPartition,
    acl_row,
    apply_batch,
    batches,
    finished_row,
    group_row,
    internal_partitions,
    offset_row,
    producer_row,
    txn_id_row,
)
from exactly.coordinator.mirror_db import reader_engine
from exactly.coordinator.mirror_models import OffsetStatus
from exactly.storage.record_batch import NO_PRODUCER_ID



def _compared_columns(table: Table) -> list[str]:
    """Columns that follow from the logs alone (a finished transaction's id depends
    on the order partitions were mirrored in)."""
    return [col.name for col in table.columns if not (table is FINISHED_TABLE and col.name == "id")]


def _sorted_rows(table: Table, rows: list[Row]) -> list[Row]:
    key = [col.name for col in table.primary_key]
    if table is FINISHED_TABLE:
        key = ["log_partition", "log_offset"]
    return sorted(rows, key=lambda row: [row[name] for name in key])


def read_state(path: Path | str) -> dict[str, list[Row]]:
    """The log-derived tables of the database at ``path``, read in one snapshot."""
    engine = reader_engine(path)
    try:
        with engine.connect() as db:
            state = {}
            for table in DERIVED_TABLES:
                columns = [table.c[name] for name in _compared_columns(table)]
                rows = [dict(row) for row in db.execute(select(*columns)).mappings()]
                state[table.name] = _sorted_rows(table, rows)
            return state
    finally:
        engine.dispose()


class _Memory:
    """The tables as dictionaries: the same rules as :class:`_Database`, no SQL."""

    def __init__(self, source: MirrorSource) -> None:
        self.source = source
        self.acls: dict[bytes, Row] = {}
        self.scram: dict[tuple[str, str], Row] = {}
        self.txn_ids: dict[str, Row] = {}
        self.finished: list[Row] = []
        self.producers: dict[int, Row] = {}
        self.offsets: dict[tuple[str, str, int, int], Row] = {}
        self.groups: dict[str, Row] = {}
        self.next_offsets: dict[TopicPartition, int] = {}

    def txn_record(self, partition: int, offset: int, record: transaction_log.TxnLogRecord) -> None:
        tid, transit = record.transactional_id, record.transit
        if transit is None:
            self.txn_ids.pop(tid, None)
            self.producers = {pid: row for pid, row in self.producers.items()
                              if row["transactional_id"] != tid}
            return
        if transit.state.is_complete:
            self.finished.append(finished_row(tid, transit, self.txn_ids.get(tid), partition, offset))
        self.txn_ids[tid] = txn_id_row(tid, transit, partition, offset)
        if transit.producer_id >= 0:
            row = producer_row(tid, transit)
            if transit.producer_id in self.producers:
                row["first_seen_ms"] = self.producers[transit.producer_id]["first_seen_ms"]
            self.producers[transit.producer_id] = row

    def offset_commit(self, partition: int, offset: int, key: offsets_log.OffsetKey,
                      value: offsets_log.OffsetValue | None, producer_id: int) -> None:
        index = (key.group, key.topic, key.partition, producer_id)
        if value is None:
            self.offsets.pop(index, None)
        else:
            self.offsets[index] = offset_row(key, value, producer_id, partition, offset)

    def group_metadata(self, partition: int, offset: int, group: str,
                       value: offsets_log.GroupValue | None) -> None:
        if value is None:
            self.groups.pop(group, None)
        else:
            self.groups[group] = group_row(group, value, partition, offset)

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        mine = [index for index, row in self.offsets.items()
                if index[3] == producer_id and row["log_partition"] == partition]
        for index in mine:
            row = self.offsets.pop(index)
            committed_index = (*index[:3], NO_PRODUCER_ID)
            committed = self.offsets.get(committed_index)
            if commit and (committed is None or committed["log_offset"] < row["log_offset"]):
                self.offsets[committed_index] = {**row, "producer_id": NO_PRODUCER_ID,
                                                 "status": OffsetStatus.COMMITTED.value}

    def acl(self, acl_id: bytes, record: cluster_metadata.AclRecord | None) -> None:
        if record is None:
            self.acls.pop(acl_id, None)
        else:
            self.acls[acl_id] = acl_row(acl_id, record, self.source.acl_names(record))

    def scram_credential(self, user_name: str, mechanism: int, iterations: int | None) -> None:
        key = (user_name, self.source.scram_mechanism_name(mechanism))
        if iterations is None:
            self.scram.pop(key, None)
        else:
            self.scram[key] = {"user_name": key[0], "mechanism": key[1], "iterations": iterations}

    def progress(self, topic: str, partition: int, next_offset: int) -> None:
        self.next_offsets[(topic, partition)] = next_offset

    def tables(self) -> dict[str, list[Row]]:
        progress = [{"topic": t, "partition": p, "next_offset": n}
                    for (t, p), n in self.next_offsets.items()]
        rows = {TXN_IDS_TABLE: list(self.txn_ids.values()), FINISHED_TABLE: self.finished,
                PRODUCERS_TABLE: list(self.producers.values()), OFFSETS_TABLE: list(self.offsets.values()),
                GROUPS_TABLE: list(self.groups.values()), ACLS_TABLE: list(self.acls.values()),
                SCRAM_TABLE: list(self.scram.values()),
                PROGRESS_TABLE: progress}
        return {table.name: _sorted_rows(table, rows[table]) for table in DERIVED_TABLES}


def expected_state_from_logs(source: MirrorSource, upto: Mapping[TopicPartition, int] | None = None,
                             max_bytes: int = FETCH_MAX_BYTES) -> dict[str, list[Row]]:
    """What :func:`read_state` should return after mirroring the logs of ``source``
    from their start: every batch, or with ``upto`` only the batches below each
    partition's given next offset (partitions it does not name are not read)."""
    memory = _Memory(source)
    for topic, partition in internal_partitions(source):
        end = None if upto is None else upto.get((topic, partition))
        if upto is not None and end is None:
            continue
        start = source.log_start_offset(topic, partition)
        for batch in batches(source, topic, partition, start, max_bytes):
            if end is not None and batch.header.base_offset >= end:
                break
            apply_batch(memory, topic, partition, batch)
    return memory.tables()

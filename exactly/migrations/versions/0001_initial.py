"""The mirror's first schema: transactional ids, finished transactions, producers,
partitions, group offsets and groups, and the mirror's own progress.

Written out rather than generated from the models, so that it stays what it was
when the models move on; the CHECK lists are the enums of this revision
(``tests/test_mirror.py`` checks that the models still accept exactly these).

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
              "CompleteAbort", "Dead", "PrepareEpochFence")
OUTCOMES = ("ABORT", "COMMIT")
OFFSET_STATUSES = ("committed", "pending")


def one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "transactional_ids",
        sa.Column("transactional_id", sa.Text(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=False),
        sa.Column("partitions", sa.Text(), nullable=False),
        sa.Column("txn_start_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_update_ms", sa.BigInteger(), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(one_of("state", TXN_STATES), name=op.f("ck_transactional_ids_state")),
        sa.PrimaryKeyConstraint("transactional_id", name=op.f("pk_transactional_ids")),
    )
    op.create_table(
        "transactions",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("transactional_id", sa.Text(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("partitions", sa.Text(), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=False),
        sa.Column("log_partition", sa.Integer(), nullable=False),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(one_of("outcome", OUTCOMES), name=op.f("ck_transactions_outcome")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transactions")),
        sa.UniqueConstraint("log_partition", "log_offset",
                            name=op.f("uq_transactions_log_partition_log_offset")),
    )
    op.create_index(op.f("ix_transactions_transactional_id"), "transactions", ["transactional_id"])
    op.create_table(
        "producer_ids",
        sa.Column("producer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("transactional_id", sa.Text(), nullable=False),
        sa.Column("producer_epoch", sa.BigInteger(), nullable=False),
        sa.Column("first_seen_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("producer_id", name=op.f("pk_producer_ids")),
    )
    op.create_index(op.f("ix_producer_ids_transactional_id"), "producer_ids", ["transactional_id"])
    op.create_table(
        "partition_producers",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("producer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("producer_epoch", sa.BigInteger(), nullable=False),
        sa.Column("coordinator_epoch", sa.BigInteger(), nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("txn_first_offset", sa.BigInteger(), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", "producer_id", name=op.f("pk_partition_producers")),
    )
    op.create_table(
        "partitions",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("high_watermark", sa.BigInteger(), nullable=False),
        sa.Column("last_stable_offset", sa.BigInteger(), nullable=False),
        sa.Column("log_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("log_end_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", name=op.f("pk_partitions")),
    )
    op.create_table(
        "group_offsets",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("producer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("commit_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("log_partition", sa.Integer(), nullable=False),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(one_of("status", OFFSET_STATUSES), name=op.f("ck_group_offsets_status")),
        sa.CheckConstraint("(status = 'committed') = (producer_id = -1)",
                           name=op.f("ck_group_offsets_status_producer")),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", "producer_id", name=op.f("pk_group_offsets")),
    )
    op.create_index(op.f("ix_group_offsets_producer_id"), "group_offsets", ["producer_id"])
    op.create_table(
        "groups",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("protocol_type", sa.Text(), nullable=False),
        sa.Column("protocol", sa.Text(), nullable=True),
        sa.Column("leader", sa.Text(), nullable=True),
        sa.Column("state_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("members", sa.Text(), nullable=False),
        sa.Column("log_partition", sa.Integer(), nullable=False),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_groups")),
    )
    op.create_table(
        "mirror_progress",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", name=op.f("pk_mirror_progress")),
    )


def downgrade() -> None:
    for table in ("mirror_progress", "groups", "group_offsets", "partitions", "partition_producers",
                  "producer_ids", "transactions", "transactional_ids"):
        op.drop_table(table)

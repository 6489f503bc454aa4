"""The last exactly-once audit of each (group, input topic, output topic):
``audit_transactions``, one row per input partition of each audited transaction
(``exactly/coordinator/mirror_models.py``, ``AuditTransaction``). Written by the audit, not
derived from the logs. The CHECK lists are the enums of this revision, written out.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OUTCOMES = ("COMMIT", "ABORT")
ABORT_CAUSES = ("client", "timeout", "fenced", "admin", "admin-partition")


def one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "audit_transactions",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("input_topic", sa.Text(), nullable=False),
        sa.Column("output_topic", sa.Text(), nullable=False),
        sa.Column("input_partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("offsets_marker_offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("transactional_id", sa.Text(), nullable=True),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("from_offset", sa.BigInteger(), nullable=False),
        sa.Column("to_offset", sa.BigInteger(), nullable=False),
        sa.Column("output_batches", sa.BigInteger(), nullable=False),
        sa.Column("output_records", sa.BigInteger(), nullable=False),
        sa.Column("abort_cause", sa.Text(), nullable=True),
        sa.Column("audit_ok", sa.BigInteger(), nullable=False),
        sa.Column("audited_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(one_of("outcome", OUTCOMES), name=op.f("ck_audit_transactions_outcome")),
        sa.CheckConstraint(one_of("abort_cause", ABORT_CAUSES), name=op.f("ck_audit_transactions_abort_cause")),
        sa.PrimaryKeyConstraint("group_id", "input_topic", "output_topic", "input_partition",
                                "offsets_marker_offset", name=op.f("pk_audit_transactions")),
    )


def downgrade() -> None:
    op.drop_table("audit_transactions")

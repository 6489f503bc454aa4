"""Which transaction protocol each transaction used: ``transaction_version`` on
``transactional_ids`` (the latest record's) and ``transactions`` (each finished one's),
from the transaction log value's ClientTransactionVersion tag
(``exactly/coordinator/transaction_log.py``): 2 for KIP-890 part 2 (Produce v12,
TxnOffsetCommit v5, EndTxn v5: an epoch bump per transaction), 0 for the earlier
protocol. Rows written before this revision are 0, as every record of their time was.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: Union[str, Sequence[str], None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ("transactional_ids", "transactions")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("transaction_version", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("transaction_version")

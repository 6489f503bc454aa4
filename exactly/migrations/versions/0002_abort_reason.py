"""Why each aborted transaction was aborted, and by whom: ``transactions.abort_cause``
(an ``AbortCause`` value: client, timeout, fenced, admin, admin-partition) and
``transactions.abort_actor``, both NULL for a commit and for an abort recorded
before this revision's broker (its log records carry no reason).

The values come from the CompleteAbort record's headers in ``__transaction_state``
(``exactly/coordinator/transaction_log.py``), so a rebuilt mirror has them again. The CHECK
list is the enum of this revision, written out (as in 0001).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

ABORT_CAUSES = ("client", "timeout", "fenced", "admin", "admin-partition")


def one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("abort_cause", sa.Text(), nullable=True))
        batch.add_column(sa.Column("abort_actor", sa.Text(), nullable=True))
        batch.create_check_constraint(op.f("ck_transactions_abort_cause"), one_of("abort_cause", ABORT_CAUSES))


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_constraint(op.f("ck_transactions_abort_cause"), type_="check")
        batch.drop_column("abort_actor")
        batch.drop_column("abort_cause")

"""Topic ids (KIP-516) in the mirror: ``topic_id`` on ``partitions``, each partition's
topic's id in Kafka's base64 form (what the API and the console show), from the same
periodic snapshot as its offsets; a topic deleted and created again under its name has
a new one. Rows written before this revision have none (NULL) until the next snapshot
replaces them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: Union[str, Sequence[str], None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("partitions") as batch:
        batch.add_column(sa.Column("topic_id", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("partitions") as batch:
        batch.drop_column("topic_id")

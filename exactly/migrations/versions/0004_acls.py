"""The security metadata of ``__cluster_metadata``: ``acls`` (every ACL, Kafka's names
for its codes) and ``scram_credentials`` (which user has which SCRAM mechanism, and
its iterations; never a salt or a key).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: Union[str, Sequence[str], None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "acls",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("resource_type", sa.Text(), nullable=False),
        sa.Column("resource_name", sa.Text(), nullable=False),
        sa.Column("pattern_type", sa.Text(), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("permission_type", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acls")),
    )
    op.create_index(op.f("ix_acls_principal"), "acls", ["principal"])
    op.create_table(
        "scram_credentials",
        sa.Column("user_name", sa.Text(), nullable=False),
        sa.Column("mechanism", sa.Text(), nullable=False),
        sa.Column("iterations", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_name", "mechanism", name=op.f("pk_scram_credentials")),
    )


def downgrade() -> None:
    op.drop_table("scram_credentials")
    op.drop_index(op.f("ix_acls_principal"), table_name="acls")
    op.drop_table("acls")

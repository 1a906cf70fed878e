"""Practice attempts remember whether the read was said in the 60-second mode, where a read
past ~170 words is over time and loses points.

Revision ID: 0003_timed
Revises: 0002_surprise
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_timed"
down_revision = "0002_surprise"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("timed", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("timed")

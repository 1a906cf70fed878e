"""Practice attempts remember whether the round is a surprise (the pathology's name hidden
until the report), instead of trusting a query string the candidate can remove.

Revision ID: 0002_surprise
Revises: 0001_attempts
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_surprise"
down_revision = "0001_attempts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("surprise", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("surprise")

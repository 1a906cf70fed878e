"""Practice attempts and their narration autosave history.

Revision ID: 0001_attempts
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_attempts"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("public_id", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("scenario", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("seed", sa.String(32), nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("narration", sa.Text, nullable=False),
        sa.Column("marks", sa.JSON, nullable=False),
        sa.Column("runs", sa.JSON, nullable=False),
        sa.Column("report", sa.JSON, nullable=True),
        sa.Column("total", sa.Float, nullable=True),
        sa.Column("trap_endorsed", sa.Boolean, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_attempts_public_id", "attempts", ["public_id"], unique=True)
    op.create_index("ix_attempts_owner", "attempts", ["owner"])
    op.create_index("ix_attempts_scenario", "attempts", ["scenario"])
    op.create_table(
        "narration_saves",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_narration_saves_attempt_id", "narration_saves", ["attempt_id"])


def downgrade() -> None:
    op.drop_index("ix_narration_saves_attempt_id", "narration_saves")
    op.drop_table("narration_saves")
    op.drop_index("ix_attempts_scenario", "attempts")
    op.drop_index("ix_attempts_owner", "attempts")
    op.drop_index("ix_attempts_public_id", "attempts")
    op.drop_table("attempts")

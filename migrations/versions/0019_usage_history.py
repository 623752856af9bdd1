"""usage history: each tenant's and queue's past usage, decayed with a half-life, for the order of queue heads
(issue 46)

Expand only: a new table the previous release never reads.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'usage_history',
        sa.Column('kind', sa.String(length=8), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('usage', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('kind', 'name'),
    )


def downgrade() -> None:
    op.drop_table('usage_history')

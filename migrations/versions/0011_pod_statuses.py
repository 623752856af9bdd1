"""pod statuses: each job's pods as its member cluster last reported them (names, phases, restarts, messages)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('pods', postgresql.JSONB(), nullable=False, server_default='[]'))


def downgrade() -> None:
    op.drop_column('jobs', 'pods')

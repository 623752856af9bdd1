"""cluster holds: the gangs the scheduling leader holds room for in each member cluster, which the agent keeps
nodes for (issue 42)

Expand only: a column with a server default the previous release neither reads nor writes.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('clusters', sa.Column('holds', postgresql.JSONB(astext_type=sa.Text()), nullable=False,
                                        server_default='[]'))


def downgrade() -> None:
    op.drop_column('clusters', 'holds')

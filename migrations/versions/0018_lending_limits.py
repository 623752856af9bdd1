"""lending limits: the most of a tenant's or queue's unused guarantee others may use (issue 46)

Expand only: a column with a server default the previous release neither reads nor writes, so its servers keep
creating tenants and queues on this schema during a rolling upgrade (they lend all, as before).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('tenants', 'queues'):
        op.add_column(table, sa.Column('lending_limit', postgresql.JSONB(astext_type=sa.Text()), nullable=False,
                                       server_default='{}'))


def downgrade() -> None:
    for table in ('tenants', 'queues'):
        op.drop_column(table, 'lending_limit')

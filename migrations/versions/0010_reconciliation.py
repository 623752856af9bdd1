"""reconciliation: the agent process holding each cluster, its drift, the clusters that refused a job for good, and how
often a job was preempted (the reclaim hysteresis)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('clusters', sa.Column('instance', sa.String(64), nullable=False, server_default=''))
    op.add_column('clusters', sa.Column('drift', postgresql.JSONB(), nullable=False, server_default='{}'))
    op.add_column('jobs', sa.Column('refusals', postgresql.JSONB(), nullable=False, server_default='{}'))
    op.add_column('jobs', sa.Column('preemptions', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    op.drop_column('jobs', 'preemptions')
    op.drop_column('jobs', 'refusals')
    op.drop_column('clusters', 'drift')
    op.drop_column('clusters', 'instance')

"""ready or requeued: how often a job's pods were not all running within its ready timeout and it went back to its
queue, and until when it waits out the backoff that followed

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Expand only: the previous release never writes them, and reads past them.
    for table in ('jobs', 'finished_jobs'):
        op.add_column(table, sa.Column('requeues', sa.Integer(), nullable=False, server_default='0'))
        op.add_column(table, sa.Column('requeue_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in ('jobs', 'finished_jobs'):
        op.drop_column(table, 'requeue_at')
        op.drop_column(table, 'requeues')

"""move wanted: a running gang whose hardware degraded, with no healthy room in its cluster, waits there for the
federation to find it a cluster with healthy room (why, as its agent said; '' when none is wanted)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Expand only: the previous release never writes it, and reads past it.
    op.add_column('jobs', sa.Column('move_wanted', sa.Text(), nullable=False, server_default=''))
    op.add_column('finished_jobs', sa.Column('move_wanted', sa.Text(), nullable=False, server_default=''))
    op.create_index('ix_jobs_move_wanted', 'jobs', ['id'], postgresql_where=sa.text("move_wanted <> ''"))


def downgrade() -> None:
    op.drop_index('ix_jobs_move_wanted', table_name='jobs')
    op.drop_column('finished_jobs', 'move_wanted')
    op.drop_column('jobs', 'move_wanted')

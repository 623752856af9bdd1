"""hyperjobs: the HyperJob a job is a sub-job of, indexed for its siblings (issue 45)

Expand only: a column with a server default the previous release neither reads nor writes.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('jobs', 'finished_jobs'):
        op.add_column(table, sa.Column('hyperjob', sa.String(length=80), nullable=False, server_default=''))
    op.create_index('ix_jobs_hyperjob', 'jobs', ['hyperjob'], postgresql_where=sa.text("hyperjob <> ''"))


def downgrade() -> None:
    op.drop_index('ix_jobs_hyperjob', table_name='jobs')
    for table in ('jobs', 'finished_jobs'):
        op.drop_column(table, 'hyperjob')

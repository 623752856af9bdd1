"""maximum run times: a tenant's cap and a queue's default (issue 46)

Expand only: two nullable columns the previous release neither reads nor writes, so its servers keep running on
this schema during a rolling upgrade.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('tenants', sa.Column('max_run_time', sa.String(length=32), nullable=True))
    op.add_column('queues', sa.Column('max_run_time', sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column('queues', 'max_run_time')
    op.drop_column('tenants', 'max_run_time')

"""queue positions are counted when read, not stored

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-20
"""
from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_column('jobs', 'queue_position')


def downgrade() -> None:
    op.add_column('jobs', sa.Column('queue_position', sa.Integer(), nullable=False, server_default='0'))

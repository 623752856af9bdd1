"""priority classes: a protected run time before a job of the class may be reclaimed

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""
from alembic import op
import sqlalchemy as sa

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('priority_classes', sa.Column('protected_run_seconds', sa.Integer(), nullable=False,
                                                server_default='0'))


def downgrade() -> None:
    op.drop_column('priority_classes', 'protected_run_seconds')

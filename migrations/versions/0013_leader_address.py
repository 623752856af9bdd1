"""leader address: where the scheduling leader answers the API front ends, and the secret they present

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Added with defaults: a server of the previous release keeps taking and renewing the lease, publishing nothing.
    op.add_column('leader_lease', sa.Column('address', sa.String(length=255), server_default='', nullable=False))
    op.add_column('leader_lease', sa.Column('secret', sa.String(length=64), server_default='', nullable=False))


def downgrade() -> None:
    op.drop_column('leader_lease', 'secret')
    op.drop_column('leader_lease', 'address')

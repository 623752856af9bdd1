"""resource flavors, and queues' flavor preferences

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('flavors',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('resource', sa.String(length=253), nullable=False),
    sa.Column('cluster_selector', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.add_column('queues', sa.Column('flavors', postgresql.JSONB(astext_type=sa.Text()), nullable=False,
                                      server_default=sa.text("'[]'::jsonb")))


def downgrade() -> None:
    op.drop_column('queues', 'flavors')
    op.drop_table('flavors')

"""resource flavors, queues' flavor preferences, why a cluster's report is not used, the leader's lease

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
    op.add_column('clusters', sa.Column('problem', sa.Text(), nullable=False, server_default=''))
    op.create_table('leader_lease',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('holder', sa.String(length=64), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table('leader_lease')
    op.drop_column('clusters', 'problem')
    op.drop_column('queues', 'flavors')
    op.drop_table('flavors')

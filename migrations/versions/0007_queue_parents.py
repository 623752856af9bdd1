"""hierarchical queues: a queue may name a parent queue of its tenant (Volcano's hierarchy)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""
from alembic import op
import sqlalchemy as sa

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('queues', sa.Column('parent', sa.String(length=63), nullable=True))
    op.create_index(op.f('ix_queues_parent'), 'queues', ['parent'], unique=False)
    op.create_foreign_key(op.f('queues_parent_fkey'), 'queues', 'queues', ['parent'], ['name'], ondelete='RESTRICT')


def downgrade() -> None:
    op.drop_constraint(op.f('queues_parent_fkey'), 'queues', type_='foreignkey')
    op.drop_index(op.f('ix_queues_parent'), table_name='queues')
    op.drop_column('queues', 'parent')

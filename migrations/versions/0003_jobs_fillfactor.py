"""leave room in each page of jobs, so that rewriting a waiting job's reason is a HOT update

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A job's reason changes while it waits; with free space on its page the new row version
    # stays there and none of the table's five indexes is touched (a heap-only tuple update).
    op.execute("ALTER TABLE jobs SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE jobs RESET (fillfactor)")

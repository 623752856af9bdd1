"""admission checks: the checks a queue or a flavor names, and how each of a dispatched job's stands (issue 46)

Expand only: columns with server defaults the previous release neither reads nor writes.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def _jsonb(name: str) -> sa.Column:
    return sa.Column(name, postgresql.JSONB(astext_type=sa.Text()), nullable=False, server_default='[]')


def upgrade() -> None:
    op.add_column('queues', _jsonb('admission_checks'))
    op.add_column('flavors', _jsonb('admission_checks'))
    for table in ('jobs', 'finished_jobs'):
        op.add_column(table, _jsonb('admission_checks'))


def downgrade() -> None:
    for table in ('jobs', 'finished_jobs'):
        op.drop_column(table, 'admission_checks')
    op.drop_column('flavors', 'admission_checks')
    op.drop_column('queues', 'admission_checks')

"""finished jobs: jobs that ended long enough ago move out of the tables the submit path and the cycle read

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The same columns as jobs, whatever they are by now; no identity (a finished job keeps its seq).
    op.execute("CREATE TABLE finished_jobs (LIKE jobs INCLUDING DEFAULTS)")
    op.create_primary_key('finished_jobs_pkey', 'finished_jobs', ['id'])
    op.create_index('ix_finished_jobs_seq', 'finished_jobs', ['seq'], unique=True)
    op.create_index('ix_finished_jobs_tenant_seq', 'finished_jobs', ['tenant', 'seq'], unique=False)
    op.create_index('ix_finished_jobs_finished_at', 'finished_jobs', ['finished_at'], unique=False)


def downgrade() -> None:
    op.execute("INSERT INTO jobs SELECT * FROM finished_jobs")
    op.drop_table('finished_jobs')

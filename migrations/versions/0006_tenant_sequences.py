"""per-tenant event numbers: a tenant's watch shows and resumes from its own sequence

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""
from alembic import op
import sqlalchemy as sa

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('tenant_event_counters',
    sa.Column('tenant', sa.String(length=63), nullable=False),
    sa.Column('last_seq', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('tenant')
    )
    op.add_column('job_events', sa.Column('tenant_seq', sa.BigInteger(), nullable=True))
    # Number the events already stored as they would have been: per tenant, in the global order.
    op.execute("UPDATE job_events e SET tenant_seq = n.tenant_seq FROM ("
               "SELECT seq, row_number() OVER (PARTITION BY tenant ORDER BY seq) AS tenant_seq FROM job_events"
               ") n WHERE e.seq = n.seq")
    op.alter_column('job_events', 'tenant_seq', nullable=False)
    op.create_index('ix_job_events_tenant_seq', 'job_events', ['tenant', 'tenant_seq'], unique=True)
    op.execute("INSERT INTO tenant_event_counters (tenant, last_seq) "
               "SELECT tenant, max(tenant_seq) FROM job_events GROUP BY tenant")


def downgrade() -> None:
    op.drop_index('ix_job_events_tenant_seq', table_name='job_events')
    op.drop_column('job_events', 'tenant_seq')
    op.drop_table('tenant_event_counters')

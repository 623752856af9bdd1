"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-20
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('clusters',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('labels', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('cordoned', sa.Boolean(), nullable=False),
    sa.Column('agent_version', sa.String(length=64), nullable=False),
    sa.Column('last_heartbeat', sa.DateTime(timezone=True), nullable=True),
    sa.Column('inventory', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('event_counter',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('last_seq', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # The single counter row that numbers job events (see models.EventCounter).
    op.execute("INSERT INTO event_counter (id, last_seq) VALUES (1, 0)")
    op.create_table('job_events',
    sa.Column('seq', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('job_id', sa.String(length=80), nullable=False),
    sa.Column('tenant', sa.String(length=63), nullable=False),
    sa.Column('queue', sa.String(length=63), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('seq')
    )
    op.create_index(op.f('ix_job_events_job_id'), 'job_events', ['job_id'], unique=False)
    op.create_table('jobs',
    sa.Column('id', sa.String(length=80), nullable=False),
    sa.Column('seq', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('tenant', sa.String(length=63), nullable=False),
    sa.Column('queue', sa.String(length=63), nullable=False),
    sa.Column('priority_class', sa.String(length=63), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('queue_position', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('hypernode', sa.String(length=253), nullable=False),
    sa.Column('tier', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('retries', sa.Integer(), nullable=False),
    sa.Column('request', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('placements', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('spec', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('seq')
    )
    op.create_index('ix_jobs_cluster_active', 'jobs', ['cluster'], unique=False, postgresql_where=sa.text("phase IN ('DISPATCHED', 'RUNNING', 'RESTARTING')"))
    op.create_index('ix_jobs_phase_seq', 'jobs', ['phase', 'seq'], unique=False)
    op.create_index('ix_jobs_queue_phase_order', 'jobs', ['queue', 'phase', sa.literal_column('priority DESC'), 'seq'], unique=False)
    op.create_index('ix_jobs_tenant_seq', 'jobs', ['tenant', 'seq'], unique=False)
    op.create_table('priority_classes',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('value', sa.Integer(), nullable=False),
    sa.Column('preemptible', sa.Boolean(), nullable=False),
    sa.Column('global_default', sa.Boolean(), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_index('uq_priority_classes_global_default', 'priority_classes', ['global_default'], unique=True, postgresql_where=sa.text('global_default'))
    op.create_table('submit_keys',
    sa.Column('tenant', sa.String(length=63), nullable=False),
    sa.Column('request_id', sa.String(length=128), nullable=False),
    sa.Column('job_id', sa.String(length=80), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('tenant', 'request_id')
    )
    op.create_table('tenants',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('weight', sa.Integer(), nullable=False),
    sa.Column('guarantee', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('limit', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('queues',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('tenant', sa.String(length=63), nullable=False),
    sa.Column('weight', sa.Integer(), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('guarantee', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('limit', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('reclaimable', sa.Boolean(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['tenant'], ['tenants.name'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_index(op.f('ix_queues_tenant'), 'queues', ['tenant'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_queues_tenant'), table_name='queues')
    op.drop_table('queues')
    op.drop_table('tenants')
    op.drop_table('submit_keys')
    op.drop_index('uq_priority_classes_global_default', table_name='priority_classes', postgresql_where=sa.text('global_default'))
    op.drop_table('priority_classes')
    op.drop_index('ix_jobs_tenant_seq', table_name='jobs')
    op.drop_index('ix_jobs_queue_phase_order', table_name='jobs')
    op.drop_index('ix_jobs_phase_seq', table_name='jobs')
    op.drop_index('ix_jobs_cluster_active', table_name='jobs', postgresql_where=sa.text("phase IN ('DISPATCHED', 'RUNNING', 'RESTARTING')"))
    op.drop_table('jobs')
    op.drop_index(op.f('ix_job_events_job_id'), table_name='job_events')
    op.drop_table('job_events')
    op.drop_table('event_counter')
    op.drop_table('clusters')

"""a default tenant and queue, as Volcano always has a `default` queue: jobs naming no queue go there

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("INSERT INTO tenants (name, weight, guarantee, \"limit\", disabled) "
               "VALUES ('default', 1, '{}', '{}', false) ON CONFLICT (name) DO NOTHING")
    op.execute("INSERT INTO queues (name, tenant, weight, priority, guarantee, \"limit\", reclaimable, state, flavors) "
               "VALUES ('default', 'default', 1, 0, '{}', '{}', true, 'OPEN', '[]') ON CONFLICT (name) DO NOTHING")


def downgrade() -> None:
    # Only when nothing was put in them since: a default queue with jobs stays, as its jobs do.
    op.execute("DELETE FROM queues q WHERE name = 'default' AND tenant = 'default' AND NOT EXISTS "
               "(SELECT 1 FROM jobs j WHERE j.queue = q.name) AND NOT EXISTS "
               "(SELECT 1 FROM queues c WHERE c.parent = q.name)")
    op.execute("DELETE FROM tenants t WHERE name = 'default' AND NOT EXISTS "
               "(SELECT 1 FROM queues q WHERE q.tenant = t.name)")

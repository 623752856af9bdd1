"""inventory version: a number that moves whenever a cluster's inventory changes, however it is written, so a
replica decodes an inventory again only when it changed

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Expand only: a server of the previous release writes inventories as before, and the trigger moves the version.
    op.execute("CREATE SEQUENCE clusters_inventory_version_seq")
    op.add_column('clusters', sa.Column('inventory_version', sa.BigInteger(), nullable=False,
                                        server_default=sa.text("nextval('clusters_inventory_version_seq')")))
    op.execute("""
        CREATE FUNCTION clusters_inventory_moved() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.inventory_version := nextval('clusters_inventory_version_seq');
            RETURN NEW;
        END $$""")
    op.execute("""
        CREATE TRIGGER clusters_inventory_moved BEFORE UPDATE ON clusters FOR EACH ROW
        WHEN (OLD.inventory IS DISTINCT FROM NEW.inventory) EXECUTE FUNCTION clusters_inventory_moved()""")


def downgrade() -> None:
    op.execute("DROP TRIGGER clusters_inventory_moved ON clusters")
    op.execute("DROP FUNCTION clusters_inventory_moved()")
    op.drop_column('clusters', 'inventory_version')
    op.execute("DROP SEQUENCE clusters_inventory_version_seq")

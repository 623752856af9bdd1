"""Alembic environment: the URL comes from the caller (federation-server db upgrade, tests)."""

from alembic import context
from sqlalchemy import create_engine, pool, text

from federation.store.models import Base

config = context.config
url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
MIGRATION_LOCK = 0x6665645F6D6967  # "fed_mig": distinct from the scheduler's leader lock


def run_migrations() -> None:
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=Base.metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata)
        with context.begin_transaction():
            # Replicas that start together (init containers) migrate one at a time: the lock is held to
            # the commit, and whoever waited then finds the schema current and has nothing to do.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            # Then each table's lock is waited for a bounded time (the caller tries the whole again): a long wait
            # would queue the running replicas' writes to that table behind it.
            lock_timeout = config.attributes.get("lock_timeout")
            if lock_timeout:
                connection.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": lock_timeout})
            context.run_migrations()
    engine.dispose()


run_migrations()

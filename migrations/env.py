"""Alembic environment: the URL comes from the caller (federation-server db upgrade, tests)."""

from alembic import context
from sqlalchemy import create_engine, pool

from federation.store.models import Base

config = context.config
url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")


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
            context.run_migrations()
    engine.dispose()


run_migrations()

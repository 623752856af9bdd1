"""Postgres persistence: schema models, engine setup, migrations and repositories."""

"""Federation control plane: API servicers, Postgres store, scheduling core and the fedctl CLI."""

__version__ = "0.1.0"

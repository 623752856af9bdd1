"""The federation-server process: configuration, startup and shutdown."""

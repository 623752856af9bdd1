"""The federation-server process: configuration, startup and shutdown."""

import os

# gRPC's C core logs to stderr on its own (a port in use, every failed TLS handshake a stranger makes): the
# server says what matters itself, in one line, so the core stays quiet unless an operator asks for it.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

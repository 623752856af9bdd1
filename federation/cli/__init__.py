"""fedctl: the command-line client for users and tenant-quota administrators."""

import os

# gRPC's C core may log a failed TLS handshake to stderr before fedctl says, in one line, what failed: quiet
# unless the user asks for detail (FEDCTL_DEBUG=1, or GRPC_VERBOSITY set). Read when gRPC starts.
if not os.environ.get("FEDCTL_DEBUG"):
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

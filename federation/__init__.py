"""Federation control plane: API servicers, Postgres store, scheduling core and the fedctl CLI."""

import os

from federation.kernel.versions import RELEASE as __version__

__all__ = ["__version__"]

# Every process of ours that starts another (the server its scheduler, `fedctl dev` a federation, the tests each
# program) forks while gRPC is live and then execs at once: it never needs gRPC's fork handlers, and with them the
# forked child may restart gRPC's poller on a descriptor `subprocess` closed and abort before its exec (grpc
# issue 43055: "Epoll1Poller … epoll_wait error: Bad file descriptor", seen under load). Read when gRPC starts.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

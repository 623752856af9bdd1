"""A Kubernetes test bed for the member agent: a real API server on loopback, nodes faked by KWOK."""

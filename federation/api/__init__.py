"""gRPC servicers: the thin edge between protobuf requests and the store."""

"""`python -m federation.healthcheck HOST:PORT [CA_FILE]`: exit 0 when the server reports SERVING.

Container health checks call this instead of shipping a grpc_health_probe binary. With CA_FILE the check
speaks TLS, as the user API does once the server has a certificate (the kubelet's own gRPC probes speak
only plaintext).
"""

import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else "localhost:50051"
    ca = Path(sys.argv[2]).read_bytes() if len(sys.argv) > 2 else None
    channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca)) if ca else grpc.insecure_channel(address)
    try:
        with channel:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError as err:
        print(f"{address}: {err.code().name}", file=sys.stderr)
        return 1
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())

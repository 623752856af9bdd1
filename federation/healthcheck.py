"""`python -m federation.healthcheck HOST:PORT`: exit 0 when the server reports SERVING.

Container health checks call this instead of shipping a grpc_health_probe binary.
"""

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else "localhost:50051"
    try:
        with grpc.insecure_channel(address) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError as err:
        print(f"{address}: {err.code().name}", file=sys.stderr)
        return 1
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())

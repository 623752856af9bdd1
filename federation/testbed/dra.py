"""What a DRA driver publishes, for KWOK's nodes: a DeviceClass for its devices and one ResourceSlice per node,
as NVIDIA's DRA driver does for a node's GPUs (a pool per node, each device with its model, index and memory)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from federation.kernel.dra import API

DRIVER = "gpu.example.com"


def device_class(name: str = DRIVER, driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def resource_slices(nodes: Sequence[str], devices: int, model: str = "H100", memory: str = "80Gi",
                    driver: str = DRIVER) -> list[dict[str, Any]]:
    return [{"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
             "spec": {"driver": driver, "nodeName": node,
                      "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                      "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}, "index": {"int": i}},
                                   "capacity": {"memory": {"value": memory}}} for i in range(devices)]}}
            for node in nodes]

"""Heterogeneous placement on the Alibaba openb trace: how much GPU is left unallocatable.

One member cluster is built from the trace's node list (1,523 nodes, 6,212 GPUs of seven models,
CPU-only nodes too). The trace's pods arrive in creation order and never leave (the trace is
mostly long-running inference services), cycling through the list until the GPUs they ask for
reach `--demand` times the cluster's (1.3 by default). Each pod is placed by one policy, or
refused where it fits nowhere. At the end, every GPU still free is one that no arriving pod could
use: the fraction of GPU capacity left unallocatable is the fragmentation (after Weng et al.,
ATC '23, whose trace this is).

- `agent`: the member agent's placement core (`member_agent.placement.place`) as the agent runs
  it, each pod a one-pod gang;
- `first-fit`: the first node, by name, where the pod fits;
- `least-allocated`: the node left emptiest (Kubernetes' default scoring), for reference.

Modelling choices: a node offers `cpu`, `memory` and GPU in thousandths (`gpu-milli`, the trace's
unit); a GPU-sharing pod (`gpu_milli` < 1000) takes its fraction, a whole-GPU pod 1000 per GPU.
Device boundaries inside a node are not modelled (two half-GPU pods may take halves of two
devices), which errs towards more capacity for every policy alike. A pod's `gpu_spec` (the allowed
models, in `gpuspec33`) becomes a node selector: nodes carry one label per allowed-model set.
Nodes are grouped into tier-1 HyperNodes of up to 32 nodes of one model.

Writes openb.json, openb.md and openb.png. Usage: python -m bench.bench_openb [--quick] [--demand 1.3]
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import bar, machine, measured, out_dir, parser, pyplot, save, write
from bench.replay.trace import traces
from federation.resources import Resources
from member_agent.placement import GangRequest, Placement, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import ROOT, HyperNodeSpec, Member, Node, Selector, build

GPU = "gpu-milli"
POD_LISTS = ("default", "gpuspec33")
POLICIES = ("agent", "first-fit", "least-allocated")
RACK = 32  # nodes per tier-1 HyperNode
MIB = 2**20


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    request: Resources
    models: frozenset[str]  # allowed GPU models; empty: any


def openb() -> Path:
    return traces() / "alibaba-gpu-v2023-openb"


def _spec_label(models: frozenset[str]) -> str:
    return "gpuspec/" + "-".join(sorted(models))


def load_pods(pod_list: str) -> list[TracePod]:
    with (openb() / f"openb_pod_list_{pod_list}.csv").open() as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (int(r["creation_time"]), r["name"]))
    pods = []
    for r in rows:
        gpus, milli = int(r["num_gpu"]), int(r["gpu_milli"] or 0)
        request = {"cpu": int(r["cpu_milli"]), "memory": int(r["memory_mib"]) * MIB}
        if gpus:
            request[GPU] = milli if gpus == 1 and 0 < milli < 1000 else 1000 * gpus
        models = frozenset(m for m in r["gpu_spec"].split("|") if m)
        pods.append(TracePod(r["name"], {k: v for k, v in request.items() if v}, models))
    return pods


def load_cluster(pods: Sequence[TracePod]) -> ClusterState:
    """The trace's nodes, labelled with their model and each allowed-model set that includes it."""
    with (openb() / "openb_node_list_all_node.csv").open() as f:
        rows = list(csv.DictReader(f))
    specs = {p.models for p in pods if p.models}
    nodes = []
    for r in rows:
        model = r["model"]
        labels = {"gpu-model": model or "none", **{_spec_label(s): "true" for s in specs if model in s}}
        allocatable = {"cpu": int(r["cpu_milli"]), "memory": int(r["memory_mib"]) * MIB, GPU: 1000 * int(r["gpu"])}
        nodes.append(Node(r["sn"], labels, {k: v for k, v in allocatable.items() if v}))
    racks: dict[str, list[str]] = {}
    for n in nodes:
        racks.setdefault(n.labels["gpu-model"], []).append(n.name)
    hypernodes = [HyperNodeSpec(f"{model.lower()}-rack{i // RACK}", 1, "rack",
                                tuple(Member("Node", Selector(exact=m)) for m in members[i:i + RACK]))
                  for model, members in sorted(racks.items()) for i in range(0, len(members), RACK)]
    return ClusterState(build(nodes, hypernodes))


def _fits(state: ClusterState, node: str, pod: TracePod, selector: Mapping[str, str]) -> bool:
    free = state.free[node]
    labels = state.topology.nodes[node].labels
    return all(free.get(r, 0) >= a for r, a in pod.request.items()) and \
        all(labels.get(k) == v for k, v in selector.items())


def _first_fit(state: ClusterState, pod: TracePod, selector: Mapping[str, str]) -> str | None:
    return next((n for n in sorted(state.free) if _fits(state, n, pod, selector)), None)


def _least_allocated(state: ClusterState, pod: TracePod, selector: Mapping[str, str]) -> str | None:
    def emptiness(node: str) -> tuple[float, str]:
        total = state.topology.nodes[node].allocatable
        free = state.free[node]
        shares = [(free[r] - a) / total[r] for r, a in pod.request.items()]
        return -sum(shares) / len(shares), node

    fitting = [n for n in state.free if _fits(state, n, pod, selector)]
    return min(fitting, key=emptiness) if fitting else None


def _agent(state: ClusterState, pod: TracePod, selector: Mapping[str, str]) -> str | None:
    result = place(state, GangRequest((TaskRequest("pod", 1, pod.request, selector),)))
    return result.pods[0].node if isinstance(result, Placement) else None


CHOOSERS: dict[str, Callable[[ClusterState, TracePod, Mapping[str, str]], str | None]] = {
    "agent": _agent, "first-fit": _first_fit, "least-allocated": _least_allocated}


def arrivals(pods: Sequence[TracePod], gpu_budget: int) -> Iterator[TracePod]:
    """The pods in order, again and again, until their GPU requests reach the budget."""
    asked = 0
    while True:
        for pod in pods:
            if asked >= gpu_budget:
                return
            asked += pod.request.get(GPU, 0)
            yield pod


def run(pod_list: str, policy: str, demand: float, samples: int = 50) -> dict[str, Any]:
    pods = load_pods(pod_list)
    state = load_cluster(pods)
    capacity = state.domain_allocatable[ROOT][GPU]
    choose = CHOOSERS[policy]
    stream = list(arrivals(pods, int(demand * capacity)))
    asked = allocated = refused = refused_gpu = 0
    curve: list[tuple[float, float]] = []
    with bar(len(stream), f"{pod_list:<9} {policy:<15}", "pods") as progress:
        for i, pod in enumerate(stream):
            selector = {_spec_label(pod.models): "true"} if pod.models else {}
            node = choose(state, pod, selector)
            gpu = pod.request.get(GPU, 0)
            asked += gpu
            if node is None:
                refused += 1
                refused_gpu += gpu > 0
            else:
                state.allocate(node, pod.request)
                allocated += gpu
            if (i + 1) % max(1, len(stream) // samples) == 0 or i + 1 == len(stream):
                curve.append((asked / capacity, allocated / capacity))
            progress.update()
    return {"pod_list": pod_list, "policy": policy, "pods": len(stream), "gpu_capacity_milli": capacity,
            "gpu_asked": asked / capacity, "gpu_allocated": allocated / capacity,
            "unallocatable": (capacity - allocated) / capacity, "refused_pods": refused,
            "refused_gpu_pods": refused_gpu, "curve": curve}


def plot(data: dict[str, Any], out: Path) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(data["pod_lists"]), figsize=(6.5 * len(data["pod_lists"]), 4.2), squeeze=False)
    for ax, pod_list in zip(axes[0], data["pod_lists"], strict=True):
        for r in data["runs"]:
            if r["pod_list"] == pod_list:
                ax.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]], label=r["policy"])
        ax.plot([0, 1, data["demand"]], [0, 1, 1], ":", color="grey", label="ideal")
        ax.set_title(f"openb, pod list {pod_list}")
        ax.set_xlabel("GPU asked for (share of capacity)")
        ax.set_ylabel("GPU allocated (share of capacity)")
        ax.grid(alpha=0.3)
        ax.legend()
    return save(fig, out, "openb.png")


def report(data: dict[str, Any], image: str) -> str:
    lines = [f"# Heterogeneous placement: Alibaba openb ({data['measured']})", "",
             f"Machine: {data['machine']}. One cluster of the trace's {data['nodes']:,} nodes "
             f"({data['gpus']:,} GPUs, seven models); the pods arrive in creation order and stay, repeated until "
             f"they ask for {data['demand']:.1f}x the GPUs. Unallocatable: the share of GPU capacity still free at "
             "the end, while pods asking for it were refused (lower is better). See the module's docstring for the "
             "modelling choices.", "",
             "| pod list | policy | pods | GPU allocated | GPU unallocatable | pods refused | GPU pods refused |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in data["runs"]:
        lines.append(f"| {r['pod_list']} | {r['policy']} | {r['pods']:,} | {r['gpu_allocated']:.1%} | "
                     f"**{r['unallocatable']:.1%}** | {r['refused_pods']:,} | {r['refused_gpu_pods']:,} |")
    lines += ["", f"![openb]({image})", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--demand", type=float, default=1.3, help="GPU asked for, as a multiple of capacity")
    args = p.parse_args(argv)
    if not 0 < args.demand <= 5:
        p.error("--demand must be above 0 and at most 5")
    pod_lists = POD_LISTS[1:] if args.quick else POD_LISTS
    runs = [run(pod_list, policy, args.demand) for pod_list in pod_lists for policy in POLICIES]
    probe = load_cluster([])
    data = {"benchmark": "openb", "measured": measured(), "machine": machine(), "demand": args.demand,
            "quick": args.quick, "pod_lists": list(pod_lists), "nodes": len(probe.topology.nodes),
            "gpus": probe.domain_allocatable[ROOT][GPU] // 1000, "runs": runs}
    out = out_dir(args)
    image = plot(data, out)
    write(out, "openb", data, report(data, image), headline(data))


def headline(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Per pod list, GPU left unallocatable by each policy; the target: the agent below least-allocated's."""
    by = {(r["pod_list"], r["policy"]): r for r in data["runs"]}
    out = []
    for pod_list in data["pod_lists"]:
        ours, spread = by[pod_list, "agent"]["unallocatable"], by[pod_list, "least-allocated"]["unallocatable"]
        out.append((f"{pod_list}: GPU unallocatable, agent / first-fit / least-allocated",
                    " / ".join(f"{by[pod_list, policy]['unallocatable']:.1%}" for policy in POLICIES)
                    + f" (target: agent below least-allocated: {'met' if ours < spread else 'not met'})"))
    return out


if __name__ == "__main__":
    main()

"""fedctl's commands for member clusters: list them, cordon, uncordon and drain clusters, nodes and HyperNodes."""

from __future__ import annotations

import click
from google.protobuf import duration_pb2

from federation.cli import output
from federation.cli.app import _format_option, cli, pass_client
from federation.cli.client import Client
from federation.kernel.durations import parse_duration
from federation.v1 import admin_pb2

# ---- clusters -------------------------------------------------------------------------------

@cli.command()
@_format_option
@pass_client
def clusters(client: Client, fmt: str) -> None:
    """List member clusters."""
    response = client.admin.ListClusters(admin_pb2.ListClustersRequest())
    output.emit(fmt, list(response.clusters), response)


_NODE_KINDS = ("node", "hypernode")
_in_cluster = click.option("--cluster", "in_cluster", default="", metavar="CLUSTER",
                           help="The member cluster of the node or HyperNode.")


def _order(client: Client, action: str, kind: str, name: str, cluster: str, grace: str | None = None) -> None:
    if not cluster:
        raise click.UsageError(f"{action} {kind} NAME needs --cluster (the member cluster it is in)")
    request = admin_pb2.OrderNodeRequest(cluster=cluster, action=action, kind=kind, name=name)
    if grace is not None:
        try:
            request.grace.CopyFrom(duration_pb2.Duration(seconds=round(parse_duration(grace))))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--grace") from None
    click.echo(client.admin.OrderNode(request).message)


@cli.command()
@click.argument("what")
@click.argument("name", required=False)
@_in_cluster
@pass_client
def cordon(client: Client, what: str, name: str | None, in_cluster: str) -> None:
    """Stop new work: `cordon CLUSTER` (the federation sends it no new jobs), or `cordon node|hypernode NAME
    --cluster C` (the cluster's agent marks them unschedulable, as kubectl cordon)."""
    if name is None:
        client.admin.CordonCluster(admin_pb2.CordonClusterRequest(name=what))
        click.echo(f"cluster/{what} cordoned")
    elif what == "cluster":
        client.admin.CordonCluster(admin_pb2.CordonClusterRequest(name=name))
        click.echo(f"cluster/{name} cordoned")
    elif what in _NODE_KINDS:
        _order(client, "cordon", what, name, in_cluster)
    else:
        raise click.BadParameter(f"{what!r}: give cluster, node or hypernode", param_hint="WHAT")


@cli.command()
@click.argument("what")
@click.argument("name", required=False)
@_in_cluster
@pass_client
def uncordon(client: Client, what: str, name: str | None, in_cluster: str) -> None:
    """Resume new work: `uncordon CLUSTER`, or `uncordon node|hypernode NAME --cluster C` (ends a drain too)."""
    if name is None or what == "cluster":
        cluster = name or what
        client.admin.UncordonCluster(admin_pb2.UncordonClusterRequest(name=cluster))
        click.echo(f"cluster/{cluster} uncordoned")
    elif what in _NODE_KINDS:
        _order(client, "uncordon", what, name, in_cluster)
    else:
        raise click.BadParameter(f"{what!r}: give cluster, node or hypernode", param_hint="WHAT")


@cli.command()
@click.argument("kind", type=click.Choice(_NODE_KINDS))
@click.argument("name")
@_in_cluster
@click.option("--grace", default=None, metavar="DURATION",
              help="The longest a gang waits for its next checkpoint before it moves (e.g. 30m); default: no bound.")
@pass_client
def drain(client: Client, kind: str, name: str, in_cluster: str, grace: str | None) -> None:
    """Cordon a node or HyperNode and move every gang off it, each at its next checkpoint (the
    federation.dev/checkpoint-interval annotation), elsewhere in the cluster within its tier limit or, with no
    room there, in another cluster."""
    _order(client, "drain", kind, name, in_cluster, grace)

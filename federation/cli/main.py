"""`fedctl`: submit and inspect jobs; manage tenants, queues, priority classes and clusters. The command group is
`federation.cli.app.cli`; each module of `federation.cli.commands` adds its commands to it."""

from __future__ import annotations

import click

from federation.cli.app import cli
from federation.cli.commands import admin, clusters, jobs, kubectl
from federation.cli.dev import dev

COMMANDS = (admin, clusters, jobs, kubectl)  # imported for the commands they add to `cli`
cli.add_command(dev)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print SHELL's completion script for fedctl: `source <(fedctl completion bash)`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, "fedctl", "_FEDCTL_COMPLETE").source())

"""The `fedctl` command group itself (its global options, its errors caught once for every command) and what
its commands share: output formats, manifests read as streams, batches."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc

from federation.cli import output, query
from federation.cli.client import DEFAULT_SERVER, Client, config_path, fail, read_config, rpc_error_lines
from federation.cli.yamldoc import Document, ManifestError, iter_documents
from federation.cliargs import hoist

T = TypeVar("T")


GLOBAL_OPTIONS = ("--server", "--token", "--ca", "--cert", "--key")


class FedctlGroup(click.Group):
    """Turns the errors users can cause into one clear line each, never a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist(args, GLOBAL_OPTIONS))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except grpc.RpcError as err:
            fail(rpc_error_lines(err, ctx.obj if isinstance(ctx.obj, Client) else DEFAULT_SERVER))
        except ManifestError as err:
            fail([str(err)])
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit, KeyboardInterrupt):
            raise
        except RecursionError:
            fail(["the input is nested too deeply to be a manifest"])
        except Exception as err:  # a bug of ours: one line saying so, never a traceback
            if os.environ.get("FEDCTL_DEBUG"):
                raise
            fail([f"unexpected {type(err).__name__}: {str(err)[:300]} (please report it; FEDCTL_DEBUG=1 shows more)"])


class OutputFormat(click.ParamType):
    """kubectl's -o: table, wide, json, yaml, jsonpath=TEMPLATE, custom-columns=NAME:.PATH,..."""

    name = "format"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        kind, sep, rest = text.partition("=")
        if text in ("table", "wide", "json", "yaml", "name") or (
                sep and kind in ("jsonpath", "custom-columns") and rest):
            if sep:  # a bad path is said now, not after the call
                try:
                    query.custom_columns([], rest) if kind == "custom-columns" else query.jsonpath({}, rest)
                except query.QueryError as err:
                    self.fail(str(err), param, ctx)
            return text
        self.fail(f"{text!r} is not one of {', '.join(output.FORMATS)}", param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(f) for f in ("table", "wide", "json", "yaml", "name", "jsonpath=", "custom-columns=")
                if f.startswith(incomplete)]


def _format_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-o", "--output", "fmt", type=OutputFormat(), default="table", show_default=True,
                        help="Output format: table, wide, json, yaml, name, jsonpath=TEMPLATE, "
                             "custom-columns=NAME:.PATH,...")(fn)


def _label_pairs(text: str, option: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (write a=b,c=d)", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def _quantity_pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in values:
        name, eq, quantity = item.partition("=")
        if not eq or not name:
            raise click.BadParameter(f"{item!r} is not RESOURCE=QUANTITY (e.g. nvidia.com/gpu=16)", param_hint=option)
        out[name] = quantity
    return out


@click.group(cls=FedctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--server", envvar="FEDERATION_SERVER", default=None,
              help=f"Address of the federation server [default: server: in the config file, else {DEFAULT_SERVER}].")
@click.option("--token", envvar="FEDERATION_TOKEN", default=None,
              help="Bearer token (fed_...) [default: token: in the config file, $FEDCTL_CONFIG or "
                   "~/.config/fedctl/config.yaml].")
@click.option("--ca", envvar="FEDERATION_CA", default=None, metavar="FILE",
              help="PEM CA certificate of the server's: connect over TLS [default: ca: in the config file].")
@click.option("--cert", envvar="FEDERATION_CERT", default=None, metavar="FILE",
              help="PEM client certificate, for a server that asks for one (with --key) [default: cert: in the "
                   "config file].")
@click.option("--key", envvar="FEDERATION_KEY", default=None, metavar="FILE",
              help="PEM private key of --cert [default: key: in the config file].")
@click.pass_context
def cli(ctx: click.Context, server: str | None, token: str | None, ca: str | None, cert: str | None,
        key: str | None) -> None:
    """Client of the federation scheduler."""
    ctx.obj = _client({"server": server, "token": token, "ca": ca, "cert": cert, "key": key})
    ctx.call_on_close(ctx.obj.close)


def _client(given: dict[str, str | None]) -> Client:
    """A client from what the command line gave, else the config file's values."""
    config = read_config(config_path()) if any(v is None for v in given.values()) else {}
    values = {k: v if v is not None else config.get(k, "") for k, v in given.items()}
    return Client(values["server"] or DEFAULT_SERVER, values["token"], values["ca"], values["cert"], values["key"])


pass_client = click.make_pass_decorator(Client)


# ---- jobs -----------------------------------------------------------------------------------

def _read_manifests(files: tuple[Path, ...]) -> Iterator[Document]:
    """Each file's documents, read as a stream: a manifest of any size is never held whole."""
    for path in files:
        try:
            with contextlib.ExitStack() as stack:
                stream = sys.stdin.buffer if str(path) == "-" else stack.enter_context(path.open("rb"))
                yield from iter_documents(stream, str(path))
        except OSError as err:
            raise ManifestError(str(path), None, f"cannot read: {err.strerror}") from None


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


_dry_run = click.option("--dry-run", type=click.Choice(["none", "client", "server"]), default="none",
                        show_default=True, help="client: read and check the manifests here; server: validated and "
                                                "judged against the federation as it stands; nothing is stored.")
_filename = click.option("-f", "--filename", "named", multiple=True, type=click.Path(path_type=Path, allow_dash=True),
                         help="Manifest file (repeatable; '-' reads standard input).")

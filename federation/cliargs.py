"""Command lines as kubectl users write them: global options after the subcommand too."""

from __future__ import annotations


def hoist(args: list[str], options: tuple[str, ...]) -> list[str]:
    """Global options moved before the subcommand, wherever they were written (`fedctl get jobs --server X`,
    as kubectl takes them); everything after `--` is left as it is."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if name in options:
            take = 1 if "=" in arg else 2
            front += args[i:i + take]
            i += take
            continue
        rest.append(arg)
        i += 1
    return front + rest

"""kubectl's ways of picking from what fedctl prints: `-o jsonpath=`, `-o custom-columns=`, `--sort-by`, and
`-l` label selectors, over the objects as `-o json` shows them.

Paths are kubectl's (`{.items[*].status.phase}`, `.metadata.name`), evaluated by jsonpath-ng; selectors are
Kubernetes' set-based grammar (`team=ml,tier!=batch,gpu,!spot,env in (prod,staging)`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonpath_ng.ext import parse

_TEMPLATE = re.compile(r"\{([^{}]*)\}")


class QueryError(ValueError):
    """A path, template or selector fedctl cannot read; the message says which part."""


def _path(expression: str) -> Any:
    text = expression.strip()
    if not text.startswith("."):
        raise QueryError(f"{expression!r}: a path starts with '.' (as .status.phase)")
    try:
        return parse("$" + text)
    except Exception as err:  # jsonpath-ng raises JsonPathParserError, and plain Exceptions for some input
        raise QueryError(f"{expression!r}: not a path fedctl can read ({err})") from None


def values(data: Any, expression: str) -> list[Any]:
    return [m.value for m in _path(expression).find(data)]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if not isinstance(value, dict | list) else json.dumps(value, separators=(",", ":"))


def jsonpath(data: Any, template: str) -> str:
    """kubectl's `-o jsonpath=TEMPLATE`: each `{path}` replaced by its values joined by spaces; `\\n` and
    `\\t` in the text around them as kubectl writes them."""
    if not _TEMPLATE.search(template):
        template = "{" + template + "}"  # kubectl takes a bare path too

    def one(match: re.Match[str]) -> str:
        return " ".join(_text(v) for v in values(data, match.group(1)))

    return _TEMPLATE.sub(one, template).replace("\\n", "\n").replace("\\t", "\t")


def custom_columns(items: Sequence[Mapping[str, Any]], spec: str) -> tuple[list[str], list[list[str]]]:
    """kubectl's `-o custom-columns=NAME:.path,...`: a header per column, a row per object (`<none>` where the
    path finds nothing)."""
    columns = []
    for part in spec.split(","):
        name, sep, expression = part.partition(":")
        if not sep or not name:
            raise QueryError(f"{part!r}: a column is NAME:.path")
        columns.append((name, _path(expression)))
    rows = []
    for item in items:
        row = []
        for _, path in columns:
            found = [_text(m.value) for m in path.find(item)]
            row.append(",".join(found) if found else "<none>")
        rows.append(row)
    return [name for name, _ in columns], rows


def sort_key(expression: str) -> Any:
    """A key for `--sort-by=.path`: objects without the field first, then by value (numbers as numbers)."""
    path = _path(expression)

    def key(item: Mapping[str, Any]) -> tuple[int, Any]:
        found = [m.value for m in path.find(item)]
        if not found:
            return (0, "")
        value = found[0]
        return (1, value) if isinstance(value, int | float) else (2, _text(value))

    return key


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # =, !=, in, notin, exists, !exists
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # != and notin, as Kubernetes reads them


_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class Selector:
    """A Kubernetes label selector, as `kubectl get -l` takes it."""

    def __init__(self, text: str) -> None:
        self.requirements: list[_Requirement] = []
        for part in _split(text):
            if m := _SET.match(part):
                self.requirements.append(_Requirement(m[1], m[2], frozenset(v.strip() for v in m[3].split(","))))
            elif m := _EQUALITY.match(part):
                self.requirements.append(_Requirement(m[1], "!=" if m[2] == "!=" else "=", frozenset({m[3]})))
            elif m := _EXISTS.match(part):
                self.requirements.append(_Requirement(m[2], "!exists" if m[1] else "exists", frozenset()))
            else:
                raise QueryError(f"{part.strip()!r} is not a label requirement (a=b, a!=b, a, !a, a in (x,y))")

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


class FieldSelector:
    """kubectl's `--field-selector`: `path=value`, `path==value` or `path!=value`, comma-separated, each path as
    `-o json` names the field (`status.phase=Running`, `spec.queue!=batch`), compared as the tables write it."""

    def __init__(self, text: str) -> None:
        self.requirements: list[tuple[Any, bool, str]] = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)", part)
            if m is None:
                raise QueryError(f"{part!r} is not a field requirement (status.phase=Running, spec.queue!=batch)")
            self.requirements.append((_path("." + m[1].lstrip(".")), m[2] == "!=", m[3]))

    def matches(self, data: Mapping[str, Any]) -> bool:
        return all((value in {_text(m.value) for m in path.find(data)}) != negated
                   for path, negated, value in self.requirements)


def _split(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for c in text:
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += c == "("
        depth -= c == ")"
        current += c
    parts.append(current)
    return [p for p in parts if p.strip()]

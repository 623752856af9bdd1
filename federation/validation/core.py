"""What every check shares: violations with the field at fault, the rule for every text, names, labels and
quantities."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from federation.kernel.jobspec import (
    MAX_REASON,
)
from federation.kernel.resources import (
    FLAVOR,
    QuantityError,
    Resources,
    parse_amount,
)

MAX_MAP_ENTRIES = 64  # entries of any map in a request (labels, annotations, resources)
MAX_TEMPLATE_BYTES = 256 * 1024  # a pod template, encoded
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

MAX_TIER = 16
DEFAULT_QUEUE = "default"  # Volcano always has it; a job naming no queue goes there (migration 0008 makes it)
DEFAULT_TENANT = "default"  # the default queue's, and where Volcano's tenant-less queues go
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Violation:
    field: str
    description: str


@dataclass
class Violations:
    """Collects violations under a path prefix, so nested checks need not know where they sit."""

    items: list[Violation] = field(default_factory=list)

    def add(self, path: str, description: str) -> None:
        self.items.append(Violation(path, description))

    def __bool__(self) -> bool:
        return bool(self.items)


def check_text(v: Violations, path: str, value: str, limit: int = MAX_REASON) -> None:
    """Free text anyone will read later in a terminal or a page: bounded, and no control characters (a
    terminal would run them: window titles, screen clears)."""
    if len(value) > limit:
        v.add(path, f"is {len(value)} characters long, at most {limit} are allowed")
    elif not value.isprintable():
        v.add(path, "must not contain control characters")


MAX_FIELD = 4096  # characters of any string field of a request that has no bound of its own
# Fields whose text spans lines; each has a bound of its own, checked in its own terms (a job's annotations
# together, MAX_ANNOTATION_BYTES; a pod template, MAX_TEMPLATE_BYTES; a description, MAX_DESCRIPTION).
MULTILINE = frozenset({
    "federation.v1.TaskSpec.pod_template_json",  # JSON of a pod template
    "federation.v1.JobSpec.annotations",  # annotation values (scripts, JSON configs)
    "federation.v1.PriorityClass.description",
})
# Control characters but line breaks and tabs, and the bidirectional overrides of "Trojan Source".
_MULTILINE_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def text_problem(value: str, limit: int = MAX_FIELD, multiline: bool = False) -> str:
    """The one rule every text a client or an agent sends is held to ("" when it keeps it): bounded, and
    printable (no NUL, which PostgreSQL cannot store; no control character, which a terminal would run; no
    format character such as a bidirectional override, which makes one name read as another). Text that spans
    lines may hold line breaks and tabs."""
    if len(value) > limit:
        return f"is {len(value):,} characters long, at most {limit:,} are allowed"
    if value.isprintable():
        return ""
    if "\x00" in value:
        return "contains a NUL character"
    if not multiline:
        return "must be printable: no control or format characters"
    return "must not contain control characters" if _MULTILINE_BAD.search(value) else ""


_OTHER, _MAP, _STRING, _MESSAGE = range(4)


@functools.cache
def _field_rule(descriptor: Any) -> tuple[int, bool, int]:
    """A field's kind for `text_violations`, whether its text spans lines, and its bound: the same for every
    message, so worked out once per field (a batch of a hundred jobs walks thousands of fields)."""
    multiline = descriptor.full_name in MULTILINE
    limit = MAX_TEMPLATE_BYTES if multiline else MAX_FIELD  # the largest of their own bounds
    if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
        return _MAP, multiline, limit
    if descriptor.type == descriptor.TYPE_STRING:
        return _STRING, multiline, limit
    return (_MESSAGE if descriptor.message_type is not None else _OTHER), multiline, limit


def text_violations(message: Any, path: str = "") -> list[Violation]:
    """Every string of a request (map keys too) held to `text_problem`, each named by its field path. A field's
    path is spelt out only where it is needed (a violation, or a message to walk): most texts keep the rule."""
    found: list[Violation] = []
    for descriptor, value in message.ListFields():
        kind, multiline, limit = _field_rule(descriptor)
        if kind == _OTHER:
            continue
        where = f"{path}.{descriptor.name}" if path else descriptor.name
        if kind == _MAP:
            for k, item in value.items():
                key = str(k)
                if not (len(key) <= MAX_FIELD and key.isprintable()) and (why := text_problem(key, MAX_FIELD)):
                    found.append(Violation(f"{where} key {key[:32]!r}", why))
                elif isinstance(item, str):
                    if not (len(item) <= limit and item.isprintable()) and (why := text_problem(item, limit,
                                                                                                  multiline)):
                        found.append(Violation(f"{where}[{key[:32]!r}]", why))
                elif hasattr(item, "ListFields"):
                    found += text_violations(item, f"{where}[{key[:32]!r}]")
        elif kind == _STRING:
            for i, item in enumerate(value if descriptor.is_repeated else [value]):
                if not (len(item) <= limit and item.isprintable()) and (why := text_problem(item, limit, multiline)):
                    found.append(Violation(f"{where}[{i}]" if descriptor.is_repeated else where, why))
        else:
            for i, item in enumerate(value if descriptor.is_repeated else [value]):
                found += text_violations(item, f"{where}[{i}]" if descriptor.is_repeated else where)
    return found


def escape_controls(value: str) -> str:
    """Control characters written out (`\\x1b`), everything else as it is."""
    return value if value.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def clean_text(value: str, limit: int = MAX_REASON) -> str:
    """An agent's free text as it is stored: control characters written out (`\\x1b`), at most `limit`
    characters. An agent's report is not refused for its wording, but nothing it says reaches a terminal raw."""
    if value.isprintable() and len(value) <= limit:
        return value
    out = escape_controls(value[:limit])
    return out if len(out) <= limit and len(value) <= limit else out[:limit - 1] + "…"


def name_problem(where: str, value: str, limit: int = 253) -> str:
    why = text_problem(value, limit)
    return f"{where} {why}" if why else ""


def check_name(v: Violations, path: str, value: str, *, required: bool = True) -> None:
    if not value:
        if required:
            v.add(path, "is required")
        return
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        v.add(path, f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
                    "starting and ending with a letter or digit, at most 63 characters)")


def check_object_name(v: Violations, path: str, value: str) -> None:
    """A Kubernetes object name (a Node's, a HyperNode's): a DNS-1123 subdomain, as the API server holds them."""
    if not value:
        v.add(path, "is required")
    elif len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        v.add(path, f"{value[:64]!r}{'...' if len(value) > 64 else ''} is not a Kubernetes object name (a DNS-1123 "
                    "subdomain: lower-case letters, digits, '-' and '.', at most 253 characters)")


def check_qualified_key(v: Violations, path: str, key: str) -> None:
    if why := key_problem(key):
        v.add(path, why)


def key_problem(key: str) -> str:
    """Why `key` is not a Kubernetes qualified name (a label key, a resource name), "" when it is. Remembered for
    keys no longer than a valid one can be: a batch of jobs names the same few resources and labels again and
    again."""
    return _key_problem(key) if len(key) <= MAX_QUALIFIED_KEY else _key_problem.__wrapped__(key)


MAX_QUALIFIED_KEY = 253 + 1 + 63  # a prefix, "/", a name


@functools.lru_cache(maxsize=4096)
def _key_problem(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"key {key!r} has an invalid prefix {prefix!r}"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return f"key {key!r} is not a valid label key"
    return ""


def check_labels(v: Violations, path: str, labels: Mapping[str, str]) -> None:
    if len(labels) > MAX_MAP_ENTRIES:
        v.add(path, f"has {len(labels)} entries, at most {MAX_MAP_ENTRIES} are allowed")
        return
    for key, value in labels.items():
        if why := key_problem(key):
            v.add(f"{path}[{key!r}]", why)
        if len(value) > 63 or not _LABEL_NAME.match(value):
            v.add(f"{path}[{key!r}]", f"value {value!r} is not a valid label value")


def check_resources(v: Violations, path: str, quantities: Mapping[str, str], flavored: bool = False) -> Resources:
    """Quantities by resource name; with `flavored`, a name may also be `<resource>@<flavor>`."""
    if len(quantities) > MAX_MAP_ENTRIES:
        v.add(path, f"has {len(quantities)} entries, at most {MAX_MAP_ENTRIES} are allowed")
        return {}
    out: Resources = {}
    for name, quantity in quantities.items():
        resource, at, flavor = name.partition(FLAVOR)
        if at and flavored:
            check_name(v, f"{path}[{name[:64]!r}]", flavor)
        elif at:
            v.add(f"{path}[{name[:64]!r}]", "names a flavor; flavors are for quotas, a job asks for the resource")
            continue
        if why := key_problem(resource):
            v.add(f"{path}[{name!r}]", why)
        try:
            if amount := parse_amount(name, quantity):
                out[name] = amount
        except QuantityError as err:
            v.add(f"{path}[{name!r}]", str(err))
    return out

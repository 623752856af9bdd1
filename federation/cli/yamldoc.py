"""YAML documents that remember where each value came from.

Errors in a manifest are only useful with a line number, and PyYAML's composed node tree has one
for every node; this builds plain Python values from that tree and keeps `path -> line` beside
them (`spec.tasks[0].replicas -> 14`).

Manifests are hostile input too, so documents are read one at a time (libyaml's parser, a file read as
a stream) and each is bounded before its values are built: at most MAX_DOCUMENT_BYTES of source (the
Kubernetes API server's limit for one object), and at most ALIAS_EXPANSION values built per node of its
tree, so an alias bomb (a few hundred bytes naming a billion values) is refused, as go-yaml refuses
"excessive aliasing", instead of exhausting memory.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import yaml

MAX_DOCUMENT_BYTES = 3 * 1024 * 1024
ALIAS_EXPANSION = 10  # values built per distinct node, beyond MIN_VALUES
MIN_VALUES = 10_000
QUOTE = 60  # characters of a value quoted in an error, as the server cuts what it quotes


def quoted(value: Any) -> str:
    """`value` as an error quotes it: its repr, cut to QUOTE characters with the length of the rest said."""
    text = repr(value)
    return text if len(text) <= QUOTE else f"{text[:QUOTE]}... ({len(text):,} characters)"


class ManifestError(Exception):
    """A problem in a manifest, located as precisely as is known."""

    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file, self.line, self.message = file, line, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {message}")


@dataclass
class Document:
    file: str
    index: int
    data: Any
    lines: dict[str, int] = field(default_factory=dict)
    start_line: int = 1

    def line(self, path: str) -> int:
        """The line of `path`, or of its closest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.start_line

    def error(self, path: str, message: str) -> ManifestError:
        return ManifestError(self.file, self.line(path), f"{path}: {message}" if path else message)


def _child(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class _Budget:
    """How many more values a document may build: its aliases may not multiply it past ALIAS_EXPANSION."""

    def __init__(self, root: yaml.Node) -> None:
        distinct, stack, seen = 0, [root], set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            distinct += 1
            if isinstance(node, yaml.MappingNode):
                stack.extend(n for pair in node.value for n in pair)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)
        self.left = distinct * ALIAS_EXPANSION + MIN_VALUES

    def take(self, node: yaml.Node) -> None:
        self.left -= 1
        if self.left < 0:
            raise ManifestError("", node.start_mark.line + 1, "the document's aliases expand too far (an alias "
                                "bomb?): write the values out")


def _scalar(node: yaml.Node, path: str, loader: yaml.SafeLoader) -> Any:
    try:
        return loader.construct_object(node)
    except ValueError:  # Python's int() refuses more than 4,300 digits; a quantity has a few
        raise ManifestError("", node.start_mark.line + 1, f"{path or 'document'}: {quoted(node.value)} is not a "
                            "usable value (too many digits)") from None


def _build(node: yaml.Node, path: str, lines: dict[str, int], loader: yaml.SafeLoader, budget: _Budget) -> Any:
    budget.take(node)
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node, path, loader)
            if not isinstance(key, str | int | float | bool):
                raise ManifestError("", key_node.start_mark.line + 1, f"{path or 'document'}: mapping keys must be "
                                    "plain values")
            out[key] = _build(value_node, _child(path, key), lines, loader, budget)
            lines[_child(path, key)] = key_node.start_mark.line + 1  # the key's line, where kubectl points
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, f"{path}[{i}]", lines, loader, budget) for i, item in enumerate(node.value)]
    return _scalar(node, path, loader)


def load_documents(text: str, file: str) -> list[Document]:
    """Every document of a YAML text (see iter_documents)."""
    return list(iter_documents(text, file))


_MARKER = re.compile(r"(---|\.\.\.)(?=[ \t\r\n]|$)")  # a document's start or end: always at column 0
_MARKER_BYTES = re.compile(_MARKER.pattern.encode())


def _oversized(lines: Iterable[str | bytes]) -> int | None:
    """The line where the first document longer than MAX_DOCUMENT_BYTES starts, read line by line and before
    anything is parsed: libyaml composes a whole document before its size is known (a 64 MB one, 1.6 GB)."""
    start, size = 1, 0
    for number, line in enumerate(lines, 1):
        marker = _MARKER_BYTES if isinstance(line, bytes) else _MARKER
        if marker.match(line):  # type: ignore[arg-type]
            start, size = number, 0
        size += len(line)
        if size > MAX_DOCUMENT_BYTES:
            return start
    return None


def _checked_source(source: str | IO[bytes], file: str) -> str | IO[bytes]:
    """`source`, once no document in it is too long to compose; a stream that cannot be read twice (stdin) is
    read into a spool file (on disk past 8 MiB) on the way."""
    if isinstance(source, str):
        lines: Iterable[str | bytes] = io.StringIO(source)
        spool = None
    elif source.seekable():
        start = source.tell()
        lines, spool = source, None
    else:
        spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115 (returned, closed by GC)
        lines = _copied(source, spool)
    line = _oversized(lines)
    if line is not None:
        raise ManifestError(file, line, f"a document of over {MAX_DOCUMENT_BYTES:,} characters; at most "
                            f"{MAX_DOCUMENT_BYTES:,} (the Kubernetes API server's limit for one object)")
    if isinstance(source, str):
        return source
    if spool is None:
        source.seek(start)
        return source
    spool.seek(0)
    return spool  # type: ignore[return-value]


def _copied(stream: IO[bytes], into: IO[bytes]) -> Iterator[bytes]:
    for line in stream:
        into.write(line)
        yield line


def iter_documents(source: str | IO[bytes], file: str) -> Iterator[Document]:
    """Parse the non-empty documents of a multi-document YAML text or binary stream one at a time, as kubectl
    splits them: empty documents skipped, the items of a `List` one document each."""
    loader = yaml.SafeLoader("")
    index = 0
    source = _checked_source(source, file)
    try:
        for node in yaml.compose_all(source, Loader=yaml.CSafeLoader):
            if node is None:
                continue
            size = node.end_mark.index - node.start_mark.index
            if size > MAX_DOCUMENT_BYTES:
                raise ManifestError(file, node.start_mark.line + 1, f"a document of {size:,} characters; at most "
                                    f"{MAX_DOCUMENT_BYTES:,} (the Kubernetes API server's limit for one object)")
            lines: dict[str, int] = {}
            try:
                data = _build(node, "", lines, loader, _Budget(node))
            except ManifestError as err:
                raise ManifestError(file, err.line, err.message) from None
            finally:
                loader.constructed_objects.clear()  # its cache of every scalar built would keep each document
            if data is None:
                continue  # an empty document (`---` then nothing, or only comments), as kubectl skips it
            items = data.get("items") if isinstance(data, dict) and str(data.get("kind", "")).endswith("List") \
                else None
            if isinstance(items, list):  # `kind: List`, what `kubectl get -o yaml` prints: its items, each located
                for i, item in enumerate(items):
                    prefix = f"items[{i}]"
                    yield Document(file, index, item, {
                        k[len(prefix) + 1:] if k.startswith(prefix + ".") else "": line
                        for k, line in lines.items() if k == prefix or k.startswith(prefix + ".")},
                        lines.get(prefix, node.start_mark.line + 1))
                    index += 1
                continue
            yield Document(file, index, data, lines, node.start_mark.line + 1)
            index += 1
    except yaml.reader.ReaderError as err:
        raise ManifestError(file, None, f"is not UTF-8 text (byte {err.position}): not a YAML manifest") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        raise ManifestError(file, line, f"invalid YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ManifestError(file, None, f"invalid YAML: {err}") from None

"""YAML documents that remember where each value came from.

Errors in a manifest are only useful with a line number, and PyYAML's composed node tree has one
for every node; this builds plain Python values from that tree and keeps `path -> line` beside
them (`spec.tasks[0].replicas -> 14`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml


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


def _build(node: yaml.Node, path: str, lines: dict[str, int], loader: yaml.SafeLoader) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str | int | float | bool):
                raise ManifestError("", key_node.start_mark.line + 1, f"{path or 'document'}: mapping keys must be "
                                    "plain values")
            out[key] = _build(value_node, _child(path, key), lines, loader)
            lines[_child(path, key)] = key_node.start_mark.line + 1  # the key's line, where kubectl points
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, f"{path}[{i}]", lines, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node)


def load_documents(text: str, file: str) -> list[Document]:
    """Parse every non-empty document of a multi-document YAML text, as kubectl splits them: empty documents
    skipped, the items of a `List` one document each."""
    loader = yaml.SafeLoader("")
    docs = []
    try:
        for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
            if node is None:
                continue
            lines: dict[str, int] = {}
            try:
                data = _build(node, "", lines, loader)
            except ManifestError as err:
                raise ManifestError(file, err.line, err.message) from None
            if data is None:
                continue  # an empty document (`---` then nothing, or only comments), as kubectl skips it
            items = data.get("items") if isinstance(data, dict) and str(data.get("kind", "")).endswith("List") \
                else None
            if isinstance(items, list):  # `kind: List`, what `kubectl get -o yaml` prints: its items, each located
                for i, item in enumerate(items):
                    prefix = f"items[{i}]"
                    docs.append(Document(file, len(docs), item, {
                        k[len(prefix) + 1:] if k.startswith(prefix + ".") else "": line
                        for k, line in lines.items() if k == prefix or k.startswith(prefix + ".")},
                        lines.get(prefix, node.start_mark.line + 1)))
                continue
            docs.append(Document(file, len(docs), data, lines, node.start_mark.line + 1))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        raise ManifestError(file, line, f"invalid YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ManifestError(file, None, f"invalid YAML: {err}") from None
    return docs

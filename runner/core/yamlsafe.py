"""YAML, read safely: no anchors or aliases (billion-laughs bombs), no nesting deeper than
MAX_YAML_DEPTH, nothing but plain data. Errors are YamlError, a ValueError."""

from __future__ import annotations

from typing import Any

import yaml

MAX_YAML_DEPTH = 20


class YamlError(ValueError):
    pass


class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader that refuses aliases (billion-laughs bombs)."""


def _check_node(node: yaml.Node, depth: int = 0) -> None:
    if depth > MAX_YAML_DEPTH:
        raise YamlError(f"frontmatter nests deeper than {MAX_YAML_DEPTH} levels")
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _check_node(child, depth + 1)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _check_node(key, depth + 1)
            _check_node(value, depth + 1)


def load(text: str, line_offset: int = 0) -> Any:
    """Parse YAML refusing anchors/aliases and deep nesting, without building objects first.
    An error names its lines as the file numbers them: `text` starts `line_offset` lines into
    it (a step's frontmatter starts on line 2, after its `---`)."""
    try:
        return _load(text)
    except yaml.MarkedYAMLError as exc:
        raise YamlError(_said(exc, line_offset)) from None
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None


def _said(exc: yaml.MarkedYAMLError, line_offset: int) -> str:
    """PyYAML's message with the file's own line numbers (not the frontmatter's, nor its "<unicode string>")."""

    def at(mark: yaml.Mark | None) -> str:
        return f"(line {mark.line + 1 + line_offset}, column {mark.column + 1})" if mark is not None else ""

    parts = [exc.context or "", at(exc.context_mark) if exc.context else "", exc.problem or "", at(exc.problem_mark)]
    return " ".join(part for part in parts if part)


def _load(text: str) -> Any:
    if "&" in text or "*" in text:
        for token in yaml.scan(text, Loader=_SafeLoader):
            if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                raise YamlError("YAML anchors and aliases are not allowed in step files")
    # One parse: the node graph is checked for depth, then built into data (yaml.load would
    # parse the text a second time).
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if text.count("[") + text.count("{") + text.count("\n") > MAX_YAML_DEPTH:
            _check_node(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()

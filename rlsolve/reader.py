"""The one reader of every file the product reads: specs, plans, layouts, profiles, case files,
catalog overlays. Each failure is one SpecError (exit code 2) naming the file and the fix:

- `-` reads standard input;
- at most MAX_INPUT_BYTES are read (so `/dev/zero` or a runaway file stops at the cap);
- the bytes must be UTF-8 text (a binary, Latin-1 or UTF-16 file is refused, not half-decoded);
- YAML is parsed with PyYAML's safe loader plus three guards: nesting deeper than MAX_DEPTH is
  refused while composing (a 100k-deep list would otherwise exhaust the Python stack), a
  document whose aliases expand to more than MAX_NODES nodes is refused before anything is
  built from it (a 734-byte alias bomb expands to gigabytes), and a key given twice in one
  mapping is refused instead of silently keeping the last value (merge keys `<<` may still be
  overridden, as YAML defines).

JSON is YAML here (a JSON document parses as YAML 1.2-compatible flow style), so .json plans
go through the same guards.
"""
from __future__ import annotations

import codecs
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rlsolve.errors import SpecError

MAX_INPUT_BYTES = 2 * 1024 * 1024   # 2 MiB: the largest shipped input (a case file) is ~240 KB
MAX_DEPTH = 64                      # a spec nests ~6 deep; a case file ~5
MAX_NODES = 1_000_000               # YAML nodes after alias expansion
STDIN = "-"

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _name(path: "str | os.PathLike") -> str:
    return "standard input" if str(path) == STDIN else str(path)


def read_bytes(path: "str | os.PathLike", what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The file's bytes (or stdin's for `-`), at most `limit` of them; SpecError otherwise."""
    if str(path) == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream substituted for stdin (tests, embedding)
            data = sys.stdin.read(limit + 1).encode("utf-8", "surrogateescape")
        else:
            data = stream.read(limit + 1)
    else:
        p = Path(path)
        try:
            if p.is_dir():
                raise SpecError(f"{p} is a directory; give a file", field=what)
            with open(p, "rb") as f:
                data = f.read(limit + 1)
        except FileNotFoundError:
            raise SpecError(f"file not found: {p}; check the path (or give - to read standard input)",
                            field=what) from None
        except OSError as e:
            raise SpecError(f"cannot read {p}: {e.strerror or e}", field=what) from None
    if len(data) > limit:
        raise SpecError(f"{_name(path)} is larger than the {limit // 1024:,} KiB input limit; give the "
                        f"spec, plan or profile file itself", field=what)
    return data


def decode(data: bytes, name: str, what: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped); anything else is refused with where."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise SpecError(f"{name} is UTF-16/32 text; save it as UTF-8", field=what)
    nul = data.find(b"\0")
    if nul >= 0:
        raise SpecError(f"{name} is binary, not text (a NUL byte at offset {nul}); give a YAML or JSON file "
                        f"saved as UTF-8", field=what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{name} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}; Latin-1 "
                        f"or binary?); save it as UTF-8", field=what) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: "str | os.PathLike", what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The file (or stdin for `-`) as UTF-8 text, size-capped; SpecError otherwise."""
    return decode(read_bytes(path, what, limit), _name(path), what)


class _TooDeep(Exception):
    pass


class _GuardedLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, Composer,
                     SafeConstructor, yaml.resolver.Resolver):
    """PyYAML's SafeLoader with a nesting cap while composing and duplicate keys refused."""

    def __init__(self, stream: str):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable: the base class reports it
                    continue
                if duplicate:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"found the key {key!r} twice (first at line "
                                           f"{seen[key].line + 1}); keep one", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# SafeLoader's constructors (str, int, float, bool, null, timestamp, binary, set, omap ...)
_GuardedLoader.yaml_constructors = SafeConstructor.yaml_constructors.copy()


def _expanded_size(root: Node, name: str, what: str) -> None:
    """Refuse a document whose aliases expand it beyond MAX_NODES nodes or MAX_DEPTH levels.
    Iterative, memoized per node: linear in the document as written, whatever it expands to."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids: list[Node] = []
        if isinstance(node, SequenceNode):
            kids = list(node.value)
        elif isinstance(node, MappingNode):
            kids = [n for pair in node.value for n in pair]
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > MAX_NODES:
                raise SpecError(f"{name}: its aliases (*name) expand to more than {MAX_NODES:,} values; "
                                f"write the values out or use fewer aliases", field=what)
            if depth[key] > MAX_DEPTH:
                raise SpecError(f"{name}: nested more than {MAX_DEPTH} levels deep (through aliases); "
                                f"flatten it", field=what)
            continue
        if key in size:
            continue
        if key in on_path:
            raise SpecError(f"{name}: an alias refers to a mapping or list that contains it (a cycle); "
                            f"remove the recursive alias", field=what)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size and not isinstance(k, ScalarNode))
        for k in kids:
            if isinstance(k, ScalarNode):
                size[id(k)], depth[id(k)] = 1, 1


def _mark(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def parse_yaml(text: str, name: str = "input", what: str = "spec file") -> Any:
    """One YAML (or JSON) document, parsed under the guards above; SpecError on any failure."""
    loader = None
    try:
        loader = _GuardedLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, name, what)
        return loader.construct_document(node)
    except SpecError:
        raise
    except _TooDeep as e:
        raise SpecError(f"{name} is nested more than {MAX_DEPTH} levels deep{_mark(e.args[0])}; a spec needs "
                        f"a handful", field=what) from None
    except yaml.reader.ReaderError as e:
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise SpecError(f"{name} has the control character {code:#04x} at offset {e.position}, which "
                        f"YAML does not allow; remove it", field=what) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        raise SpecError(f"YAML syntax error{_mark(mark)}: {problem}; fix the YAML", field=what) from None
    except yaml.YAMLError as e:
        raise SpecError(f"YAML syntax error: {e}; fix the YAML", field=what) from None
    except (ValueError, OverflowError) as e:
        # a scalar the resolver matched but Python cannot build: an int of 5,000 digits, 2024-13-45
        raise SpecError(f"{name}: a value cannot be read ({e}); fix it", field=what) from None
    except RecursionError:  # the depth cap should make this unreachable; one line all the same
        raise SpecError(f"{name} is nested too deeply; flatten it", field=what) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: "str | os.PathLike", what: str = "spec file") -> dict:
    """A YAML/JSON file (or stdin for `-`) holding a mapping at the top level."""
    name = _name(path)
    data = parse_yaml(read_text(path, what), name, what)
    if data is None:
        raise SpecError(f"{name} is empty; write a spec (see examples/)" if what == "spec file"
                        else f"{name} is empty", field=what)
    if not isinstance(data, dict):
        raise SpecError(f"{name} must hold a mapping at the top level, not {type(data).__name__}", field=what)
    return data

"""Reading YAML into values per the format: every problem with its line and column, `include:`
files read depth-first, bytes that are not UTF-8 or characters YAML refuses reported where they are."""

from __future__ import annotations

import difflib
import glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..versions import LATEST, UnknownVersion, parse_version
from .format import FORMAT, INCLUDED, ROOT_ONLY, Field, listed
from .model import Source
from .problems import Mark, Problem

try:  # libyaml's composer is ~10x faster on large topologies
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


_TAGS = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true/false",
    "tag:yaml.org,2002:null": "nothing (null)",
}


class Reader:
    """Reads one file's node tree; problems go to the list every file of the topology shares."""

    def __init__(self, path: str, problems: list[Problem] | None = None, root: str | None = None):
        self.path = path
        self.problems: list[Problem] = [] if problems is None else problems
        self.root = root  # the root file, when this one is included

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def fail(self, node_or_mark: yaml.Node | Mark, message: str) -> None:
        mark = node_or_mark if isinstance(node_or_mark, Mark) else self.mark(node_or_mark)
        self.problems.append(Problem(mark, message))

    @staticmethod
    def describe(node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        return _TAGS.get(node.tag, "a value")

    def read(self, node: yaml.Node, spec: Field, where: str) -> Any:
        """Value of node per spec, or None after recording a problem."""
        reader = getattr(self, "_read_" + spec.type)
        return reader(node, spec, where)

    def _scalar(self, node: yaml.Node, where: str, expected: str) -> str | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            self.fail(node, f"{where} must be {expected}, not {self.describe(node)}")
            return None
        return node.value

    def _read_name(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        value = self._scalar(node, where, "a name (a string)")
        if value is not None and not value.strip():
            self.fail(node, f"{where} must not be empty")
            return None
        if value is not None and not value.isprintable():
            bad = next(ch for ch in value if not ch.isprintable())
            self.fail(node, f"{where} contains the control character {bad!r}: names hold printable characters only; remove it")
            return None
        return value

    _read_string = _read_name

    def _read_version(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        if isinstance(node, yaml.ScalarNode) and node.tag in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int"):
            self.fail(node, f'{where} must be a string: write it quoted, e.g. {where.split()[-1]}: "{node.value}"')
            return None
        value = self._scalar(node, where, f'a version string such as "{LATEST}"')
        if value is None:
            return None
        try:
            parse_version(value)
        except UnknownVersion as exc:
            self.fail(node, str(exc))
            return None
        return value

    def _read_boolean(self, node: yaml.Node, spec: Field, where: str) -> bool | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            self.fail(node, f"{where} must be true or false, not {self.describe(node)}")
            return None
        return node.value.lower() in ("true", "yes", "on", "y")

    def _read_count(self, node: yaml.Node, spec: Field, where: str) -> int | None:
        """A whole number of at least 1 (fleet.yaml's parallel)."""
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:int" or int(node.value) < 1:
            shown = node.value if isinstance(node, yaml.ScalarNode) else self.describe(node)
            self.fail(node, f"{where} must be a whole number of at least 1, not {shown}")
            return None
        return int(node.value)

    def _read_limit(self, node: yaml.Node, spec: Field, where: str) -> int | str | None:
        """A count (0 or more) or a percentage written `10%` (fleet.yaml's max_failures)."""
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int" and int(node.value) >= 0:
            return int(node.value)
        value = node.value.strip() if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:str" else ""
        number = value[:-1] if value.endswith("%") else ""
        if number.replace(".", "", 1).isdigit() and float(number) <= 100:
            return value
        shown = node.value if isinstance(node, yaml.ScalarNode) else self.describe(node)
        self.fail(node, f"{where} must be a count (0 or more) or a percentage such as 10%, not {shown}")
        return None

    def _read_enum(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        value = self._scalar(node, where, "one of " + ", ".join(spec.values))
        if value is not None and value not in spec.values:
            hint = difflib.get_close_matches(value, spec.values, n=1)
            suffix = f"; did you mean {hint[0]!r}?" if hint else ""
            self.fail(node, f"{where} is {value!r}; expected one of {', '.join(spec.values)}{suffix}")
            return None
        return value

    def _read_list(self, node: yaml.Node, spec: Field, where: str) -> list[tuple[Any, Mark]] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{where} must be a list, not {self.describe(node)}")
            return None
        items = []
        for index, item in enumerate(node.value):
            value = self.read(item, spec.items, f"{where}[{index}]")
            if value is not None:
                items.append((value, self.mark(item)))
        return items

    def _read_object(self, node: yaml.Node, spec: Field, where: str) -> Obj | bool | None:
        if spec.allow_false and isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:bool":
            if node.value.lower() in ("false", "no", "off", "n"):
                return False
        if not isinstance(node, yaml.MappingNode):
            expected = "a mapping or false" if spec.allow_false else "a mapping"
            self.fail(node, f"{where} must be {expected}, not {self.describe(node)}")
            return None
        values: dict[str, Any] = {}
        marks: dict[str, Mark] = {}
        seen: dict[str, Mark] = {}
        hinted: set[str] = set()  # keys an unknown key was taken for: their absence is that same problem
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or key_node.tag != "tag:yaml.org,2002:str":
                self.fail(key_node, f"keys of {where} must be words, not {self.describe(key_node)}")
                continue
            if key in seen:
                self.fail(key_node, f"{key!r} is given twice in {where} (first at line {seen[key].line}); keep one")
                continue
            seen[key] = self.mark(key_node)
            sub = spec.fields.get(key)
            if sub is None and spec is INCLUDED and key in FORMAT.fields:
                self.fail(
                    key_node,
                    f"{key} is a setting of the whole topology and an included file cannot set it: move it to the root file "
                    f"{self.root}; an included file holds {listed(INCLUDED.fields)} only",
                )
                continue
            if sub is None:
                hint = difflib.get_close_matches(key, list(spec.fields), n=1)
                suggestion = f"did you mean {hint[0]!r}? " if hint else ""
                hinted.update(hint)
                self.fail(key_node, f"unknown key {key!r} in {spec.title or where}; {suggestion}allowed keys: {', '.join(spec.fields)}")
                continue
            if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:null" and not sub.required:
                continue  # an explicit null means "use the default"
            value = self.read(value_node, sub, key if where in ("topology", "included file") else f"{where}.{key}")
            if value is not None:
                values[key] = value
                marks[key] = self.mark(value_node)
            else:
                marks[key] = self.mark(value_node)
        for key, sub in spec.fields.items():
            if sub.required and key not in seen and key not in hinted:
                hint = ""
                if spec is FORMAT and seen and not set(seen) & set(ROOT_ONLY):
                    hint = "; or, if another file includes this one, pass that file with --topology"
                self.fail(node, f"{spec.title or where} needs a {key!r} key{hint}")
        return Obj(values, marks, self.mark(node))


@dataclass
class Obj:
    values: dict
    marks: dict
    mark: Mark

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def decode(data: bytes, path: str, problems: list[Problem]) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        column = len(before.rpartition(b"\n")[2].decode("utf-8", errors="replace")) + 1  # in characters, as YAML's marks
        mark = Mark(path, before.count(b"\n") + 1, column)
        problems.append(
            Problem(mark, f"not UTF-8 text (byte 0x{data[exc.start]:02x}): save the file as UTF-8, or remove or retype the character here")
        )
        return None


def compose(text: str, path: str, problems: list[Problem]) -> yaml.Node | None:
    """The YAML node tree of text; None for an empty file, or after recording why it is not YAML."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other control characters)
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before.rpartition("\n")[2]) + 1
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        message = f"the character {character} is not allowed in a YAML file; remove it (a control character: a copy or an editor left it)"
        problems.append(Problem(Mark(path, line, column), message))
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        indent = _indentation(text, line)
        if "\t" in indent:  # PyYAML's words for it ("cannot start any token") do not say it is a tab
            column = indent.index("\t") + 1
            problems.append(
                Problem(Mark(path, line, column), "a tab in the indentation: YAML indents with spaces only; replace it with spaces")
            )
            return None
        message = f"not valid YAML: {exc.problem or exc}"
        if exc.context and exc.context_mark and exc.context_mark.line + 1 != line:
            message += f" ({exc.context} at line {exc.context_mark.line + 1})"
        problems.append(Problem(Mark(path, line, column), message))
        return None


def _indentation(text: str, line: int) -> str:
    """The leading blanks (spaces and tabs) of a line of text, counted from 1."""
    lines = text.splitlines()
    found = lines[line - 1] if 0 < line <= len(lines) else ""
    return found[: len(found) - len(found.lstrip(" \t"))]


GLOB_CHARACTERS = frozenset("*?[")


class Includes:
    """The files a root file includes, read depth-first in include order. Their entries follow the
    including file's own, so a split topology is the one file that lists them in that order."""

    def __init__(self, root: str, text: str, problems: list[Problem]):
        self.root = root
        self.folder = Path(root).resolve().parent
        self.problems = problems
        self.sources = [self._source(root, text.encode("utf-8"))]
        self.seen: dict[Path, Mark] = {}  # every included file, and where it was included first

    def _source(self, path: str, data: bytes) -> Source:
        relative = Path(os.path.relpath(Path(path).resolve(), self.folder)).as_posix()
        return Source(path, relative, hashlib.sha256(data).hexdigest())

    def merge(self, root: Obj) -> None:
        """Add the entries of every included file to the root's lists."""
        included = self._walk(root, self.root, ((Path(self.root).resolve(), self.root),))
        for key in INCLUDED.fields:
            entries = [entry for obj in included for entry in obj.get(key, [])]
            if key != "include" and entries:
                root.values[key] = root.get(key, []) + entries

    def _walk(self, obj: Obj, path: str, chain: tuple[tuple[Path, str], ...]) -> list[Obj]:
        found = []
        for entry, mark in obj.get("include", []):
            for target in self._targets(entry, mark, path):
                resolved = Path(target).resolve()
                ancestors = [file for file, _ in chain]
                if resolved in ancestors:
                    cycle = " -> ".join([name for _, name in chain[ancestors.index(resolved) :]] + [target])
                    self.problems.append(Problem(mark, f"include cycle: {cycle}: remove one of these includes"))
                    continue
                if resolved in self.seen:
                    first = self.seen[resolved]
                    self.problems.append(Problem(mark, f"{target} is included twice (first at {first}): include each file once"))
                    continue
                self.seen[resolved] = mark
                included = self._read(target)
                if included is not None:
                    found.append(included)
                    found += self._walk(included, target, (*chain, (resolved, target)))
        return found

    def _targets(self, entry: str, mark: Mark, including: str) -> list[str]:
        """The files an include entry names: one path, or a pattern's matches in sorted order (never the including file)."""
        joined = os.path.normpath(os.path.join(os.path.dirname(including), entry))
        if GLOB_CHARACTERS.isdisjoint(entry):
            if os.path.isfile(joined):
                return [joined]
            if os.path.exists(joined):
                message = f"{joined} is not a file: include a file, or a pattern such as {entry.rstrip('/')}/*.yaml"
            else:
                message = f"included file {joined} not found: create it, or correct or remove this entry"
            self.problems.append(Problem(mark, message))
            return []
        itself = Path(including).resolve()
        pattern = os.path.normpath(os.path.join(glob.escape(os.path.dirname(including)), entry))  # the folder's name is no pattern
        matches = sorted(found for found in glob.glob(pattern, recursive=True) if os.path.isfile(found) and Path(found).resolve() != itself)
        if not matches:
            self.problems.append(
                Problem(mark, f"include pattern {entry!r} matches no file ({joined}): correct it, or remove it until a file matches")
            )
        return matches

    def _read(self, path: str) -> Obj | None:
        """An included file's entries; None when it is empty or unreadable (reported)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            self.problems.append(Problem(Mark(path), f"cannot be read: {exc.strerror or exc}"))
            return None
        self.sources.append(self._source(path, data))
        text = decode(data, path, self.problems)
        node = compose(text, path, self.problems) if text is not None else None
        if node is None:
            return None  # an empty file adds nothing
        included = Reader(path, self.problems, root=self.root).read(node, INCLUDED, "included file")
        return included if isinstance(included, Obj) else None

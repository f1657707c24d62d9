"""Procedural bug injection: AST-level mutations of non-test Python code.

Every mutation is one text edit (start, end, replacement) found from the AST, so formatting and
comments outside the edit are untouched and the gold patch is a small, readable diff. Only code
inside function bodies is mutated (module-level edits break imports, not behaviour); docstrings,
`if TYPE_CHECKING:` blocks and `__main__` guards are left alone. A mutation is kept only when the
edited file still parses and its AST differs from the original.

Kinds (`KINDS`): compare (< <=, == !=, in / not in, is / is not), boolop (and/or, drop `not`),
off_by_one (range() arguments, slice bounds, constant indexes), swap_args (the first two
positional arguments of a call), drop_statement, drop_branch (an `else:` block or a whole `if`
without one), constant (numbers +-1, True/False), return_value (`return x` -> `return None`,
predicates negated).
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

KINDS = ("compare", "boolop", "off_by_one", "swap_args", "drop_statement", "drop_branch",
         "constant", "return_value")
NOT_SOURCE_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks",
                   "bench", "scripts", "tools", "build", "dist", "ci", ".github"}
NOT_SOURCE_FILES = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "_version.py",
                    "version.py", "__about__.py", "__main__.py"}

_COMPARE = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
            ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"),
            ast.IsNot: ("is not", "is"), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
_TOKEN = {"<": r"<(?![=<])", "<=": r"<=", ">": r"(?<![->])>(?![=>])", ">=": r">=", "==": r"==",
          "!=": r"!=", "is": r"\bis\b(?!\s+not\b)", "is not": r"\bis\s+not\b",
          "in": r"(?<!not )\bin\b", "not in": r"\bnot\s+in\b"}
_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
_DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete,
              ast.Continue, ast.Break)


@dataclass(frozen=True)
class Mutation:
    """One edit of one file: text[start:end] becomes `replacement`."""

    kind: str
    path: str
    line: int
    function: str
    """The enclosing function's qualified name ('Class.method'), for the report and for spreading
    mutants over functions."""
    start: int
    end: int
    original: str
    replacement: str

    @property
    def id(self) -> str:
        key = f"{self.kind}\0{self.path}\0{self.start}\0{self.end}\0{self.replacement}"
        return hashlib.sha256(key.encode()).hexdigest()[:10]

    def apply(self, text: str) -> str:
        if text[self.start:self.end] != self.original:
            raise ValueError(f"{self.path}: the text at {self.line} is not what the mutation expects")
        return text[:self.start] + self.replacement + text[self.end:]

    def describe(self) -> str:
        old = " ".join(self.original.split())[:60] or "''"
        new = " ".join(self.replacement.split())[:60] or "''"
        return f"{self.kind} {self.path}:{self.line} in {self.function}: {old!r} -> {new!r}"


def is_source_file(path: str) -> bool:
    """Non-test library code: .py files outside test, doc, example and tooling folders."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    if not name.endswith(".py") or name in NOT_SOURCE_FILES:
        return False
    if name.startswith("test_") or name.endswith("_test.py") or name == "tests.py":
        return False
    return not any(p in NOT_SOURCE_DIRS or p.startswith(".") or p.endswith(".egg-info")
                   for p in parts[:-1])


class _Text:
    """Maps AST positions (1-based lines, UTF-8 byte columns) to offsets in the text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        raw = self.lines[line - 1].encode()[:col]
        return self.starts[line - 1] + len(raw.decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def own_lines(self, first: ast.stmt, last: ast.stmt) -> tuple[int, int, str] | None:
        """(start, end, indent) of the whole lines `first`..`last` occupy, if nothing else does."""
        start, _ = self.span(first)
        _, end = self.span(last)
        head = self.text[self.starts[first.lineno - 1]:start]
        tail = self.text[end:self.starts[last.end_lineno]]
        if head.strip() or tail.strip() and not tail.strip().startswith("#"):
            return None
        return self.starts[first.lineno - 1], self.starts[last.end_lineno], head


def _skipped_block(node: ast.stmt) -> bool:
    if isinstance(node, ast.If):
        test = ast.unparse(node.test)
        return "TYPE_CHECKING" in test or "__name__" in test
    return False


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, text: _Text) -> None:
        self.path = path
        self.t = text
        self.scope: list[str] = []
        self.depth = 0  # > 0 inside a function body
        self.found: list[Mutation] = []
        self._docstrings: set[int] = set()

    # ---- scopes ------------------------------------------------------------------------------

    def _body_of(self, node: ast.AST, name: str, function: bool) -> None:
        self.scope.append(name)
        self.depth += function
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            self._docstrings.add(id(body[0]))
        if function:
            self._block(body)
        for child in body:
            self.visit(child)
        self.depth -= function
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self._body_of(node, node.name, True)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._body_of(node, node.name, False)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.generic_visit(node)

    # ---- helpers -----------------------------------------------------------------------------

    def add(self, kind: str, node: ast.AST, start: int, end: int, replacement: str) -> None:
        if not self.depth:
            return
        original = self.t.text[start:end]
        if original == replacement:
            return
        self.found.append(Mutation(kind, self.path, node.lineno, ".".join(self.scope) or "<module>",
                                   start, end, original, replacement))

    def replace_node(self, kind: str, node: ast.AST, replacement: str) -> None:
        start, end = self.t.span(node)
        self.add(kind, node, start, end, replacement)

    def _token_between(self, kind: str, anchor: ast.AST, left: ast.AST, right: ast.AST,
                       pattern: str, new: str) -> None:
        _, a = self.t.span(left)
        b, _ = self.t.span(right)
        gap = self.t.text[a:b]
        hits = list(re.finditer(pattern, gap))
        if len(hits) == 1:
            self.add(kind, anchor, a + hits[0].start(), a + hits[0].end(), new)

    # ---- statements --------------------------------------------------------------------------

    def generic_visit(self, node: ast.AST) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self._block(block)
        super().generic_visit(node)

    def _block(self, block: list[ast.stmt]) -> None:
        if not self.depth:
            return
        others = [s for s in block if id(s) not in self._docstrings]
        for stmt in others:
            droppable = isinstance(stmt, _DROPPABLE) and id(stmt) not in self._docstrings and not (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
            is_bare_if = isinstance(stmt, ast.If) and not stmt.orelse and not _skipped_block(stmt)
            if not (droppable or is_bare_if):
                continue
            lines = self.t.own_lines(stmt, stmt)
            if lines is None:
                continue
            start, end, indent = lines
            is_elif = self.t.text[start:end].lstrip().startswith("elif")
            repl = "" if len(others) > 1 or is_elif else f"{indent}pass\n"
            self.add("drop_branch" if is_bare_if else "drop_statement", stmt, start, end, repl)

    def visit_If(self, node: ast.If) -> None:
        if _skipped_block(node):
            return
        if node.orelse and self.depth:
            first, last = node.orelse[0], node.orelse[-1]
            is_elif = isinstance(first, ast.If) and len(node.orelse) == 1 and \
                self.t.text[self.t.starts[first.lineno - 1]:].lstrip().startswith("elif")
            if not is_elif:
                lines = self.t.own_lines(first, last)
                between = range(node.body[-1].end_lineno, first.lineno)
                else_lines = [n for n in between if re.match(r"^\s*else\s*:\s*(#.*)?$", self.t.lines[n])]
                if lines and len(else_lines) == 1:
                    self.add("drop_branch", node, self.t.starts[else_lines[0]], lines[1], "")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value in (None, True, False)):
            predicate = isinstance(value, (ast.Compare, ast.BoolOp)) or (
                isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not))
            text = self.t.segment(value)
            self.replace_node("return_value", value, f"not ({text})" if predicate else "None")
        self.generic_visit(node)

    # ---- expressions -------------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            old, new = _COMPARE[type(op)]
            self._token_between("compare", node, operands[i], operands[i + 1], _TOKEN[old], new)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for left, right in zip(node.values, node.values[1:]):
            self._token_between("boolop", node, left, right, rf"\b{old}\b", new)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            start, _ = self.t.span(node)
            inner, _ = self.t.span(node.operand)
            match = re.match(r"not\s*", self.t.text[start:inner])
            if match:
                self.add("boolop", node, start, start + match.end(), "")
        elif isinstance(node.op, ast.USub) and _int(node.operand) is not None:
            if not getattr(node, "_orchard_bound", False):
                self.replace_node("constant", node, str(-_int(node.operand) - 1))
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args
        if isinstance(node.func, ast.Name) and node.func.id == "range" and 1 <= len(args) <= 3 \
                and not any(isinstance(a, ast.Starred) for a in args):
            if len(args) == 1:
                self._bound(args[0], upper=True)
            else:
                self._bound(args[0], upper=False)
                self._bound(args[1], upper=True)
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
            first, second = self.t.segment(args[0]), self.t.segment(args[1])
            if first != second and "\n" not in first + second:
                start, _ = self.t.span(args[0])
                _, end = self.t.span(args[1])
                between = self.t.text[start + len(first):end - len(second)]
                self.add("swap_args", node, start, end, second + between + first)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        if isinstance(index, ast.Slice):
            if index.lower is not None:
                self._bound(index.lower, upper=False)
            if index.upper is not None:
                self._bound(index.upper, upper=True)
        elif _int(index) is not None or (isinstance(index, ast.UnaryOp) and _int(index.operand) is not None):
            self._bound(index, upper=False)
        self.generic_visit(node)

    def _bound(self, node: ast.expr, upper: bool) -> None:
        """An off-by-one at a range argument, a slice bound or an index."""
        node._orchard_bound = True  # type: ignore[attr-defined]  (constant skips these)
        value = _int(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int(node.operand) is not None:
            node.operand._orchard_bound = True  # type: ignore[attr-defined]
            self.replace_node("off_by_one", node, str(-_int(node.operand) - 1))
        elif value is not None:
            self.replace_node("off_by_one", node, str(value + 1 if value <= 0 else value - 1))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) \
                and _int(node.right) == 1:
            _, left_end = self.t.span(node.left)
            _, end = self.t.span(node)
            self.add("off_by_one", node, left_end, end, "")
        else:
            text = self.t.segment(node)
            if "\n" in text:
                return
            text = text if isinstance(node, _ATOMIC) else f"({text})"
            self.replace_node("off_by_one", node, f"{text} - 1" if upper else f"{text} + 1")

    def visit_Constant(self, node: ast.Constant) -> None:
        if getattr(node, "_orchard_bound", False):
            return
        value = node.value
        if isinstance(value, bool):
            self.replace_node("constant", node, repr(not value))
        elif isinstance(value, int):
            self.replace_node("constant", node, str({0: 1, 1: 0}.get(value, value + 1)))
        elif isinstance(value, float):
            self.replace_node("constant", node, repr(value + 1.0))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # f-strings: positions inside them are not reliable on every Python


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _top_level_spans(tree: ast.Module, text: _Text) -> list[tuple[int, int, ast.stmt]]:
    """(start, end, node) of each top-level statement: whole lines, decorators included."""
    spans = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        spans.append((text.starts[first - 1], text.starts[node.end_lineno], node))
    return spans


def find_mutations(path: str, text: str) -> list[Mutation]:
    """Every mutation of one module's text that parses and changes its AST, in file order.

    Each mutant is checked on the top-level statement that holds it (the rest of the file is
    untouched text, so it parses to the same nodes): the same verdicts as parsing the whole
    file, at a fraction of the cost on large modules."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = _Text(text)
    finder = _Finder(path, lines)
    finder.visit(tree)
    spans = _top_level_spans(tree, lines)
    starts = [a for a, _, _ in spans]
    dumps: dict[int, str] = {}
    seen: set[tuple[int, int, str]] = set()
    valid: list[Mutation] = []
    for mutation in sorted(finder.found, key=lambda m: (m.start, m.end, m.kind, m.replacement)):
        key = (mutation.start, mutation.end, mutation.replacement)
        if key in seen:
            continue
        seen.add(key)
        k = bisect.bisect_right(starts, mutation.start) - 1
        if k < 0 or mutation.end > spans[k][1]:
            continue
        a, b, node = spans[k]
        segment = text[a:mutation.start] + mutation.replacement + text[mutation.end:b]
        try:
            changed = ast.dump(ast.parse(segment))
        except (SyntaxError, ValueError):
            continue
        if k not in dumps:
            dumps[k] = ast.dump(ast.Module(body=[node], type_ignores=[]))
        if changed != dumps[k]:
            valid.append(mutation)
    return valid

"""Plans for new SQL without parsing it again: each query *shape* is parsed once.

An analyst exploring, or a dashboard with a date picker, sends the same statement with new
constants: `... WHERE age BETWEEN 31 AND 47 ...`. Parsing is over half the cost of planning such a
query, and the parse tree does not depend on the constants. A query's *shape* is its text with
every numeric and string literal replaced by a marker (a regular expression, a few µs); the first
query of a shape is parsed and bound as usual, and its parse tree is kept. A later query of the same
shape sets the kept tree's literals to its own values and binds that tree (`engine.sql.bind.bind_select`),
skipping sqlglot's tokenizer and parser.

Only literals in positions whose parse cannot depend on their value are substituted: operands of
comparisons, BETWEEN, IN and DATE '…' in conditions, and LIMIT/OFFSET. A literal anywhere else
(`GROUP BY 1`, `DATE_TRUNC('year', d)`, `COUNT(1)`) is *fixed*: a query reuses the shape only when
it has the same text there. Each substituted literal is matched to its place in the tree by its
character span, so two equal constants cannot be swapped. A bind that fails is planned again from
its own text, so every error message quotes the caller's positions and words.

Binding a WHERE condition depends only on the table's declaration and the condition's own text
(`engine.sql.bind.Binder.conjunct`), so bound conditions are remembered by shape, position and the texts
of their constants (`_BoundConjuncts`): a new query that keeps some of its predecessor's conditions
binds only the others.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from engine.errors import PrimaError
from engine.plan import QueryPlan
from engine.sql.bind import Binder, Bound, ConjunctMemo, bind_select, conjuncts, parse_select
from engine.sql.constants import time_dependent
from storage.schema import TableSpec

Lookup = Callable[[str, bool], TableSpec | None]

# Quoted identifiers are matched (and kept) so that a quote or digit inside one is not a literal.
# The leading look-ahead lets the scan skip every other character at once (twice as fast).
_TOKENS = re.compile(
    r"""(?=["'\d.])(?:(?P<ident>"(?:[^"]|"")*")|(?P<string>'(?:[^']|'')*')"""
    r"""|(?<![\w.$])(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w.'"]))"""
)
# Text the expression above does not read the way the SQL tokenizer does: comments, escapes,
# dollar quoting, NUL. Such statements are always parsed in full.
_UNSHAPED = ("--", "/*", "\\", "$", "\0")
_UNSHAPED_RE = re.compile("|".join(re.escape(mark) for mark in _UNSHAPED))
_SUBSTITUTED_PARENTS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In, exp.Limit, exp.Offset)
MAX_SHAPES = 4_096
MAX_BOUND_CONJUNCTS = 16_384  # a few KB each at most: a few tens of MB at worst
_SERIALS = itertools.count()


@dataclass
class _Shape:
    root: exp.Select  # the first query's parse tree; its substituted literals are rewritten per bind
    literals: tuple[exp.Literal | None, ...]  # per literal of the text: its tree node, None where fixed
    fixed: tuple[tuple[int, str], ...]  # (literal index, text) a query must repeat to use this shape
    conjuncts: dict[int, tuple[int, tuple[int, ...]]]  # id(WHERE conjunct) → (its position, its literals' indices)
    outside: tuple[int, ...]  # substituted literals in no WHERE conjunct (LIMIT, OFFSET): set on every bind
    serial: int = field(default_factory=lambda: next(_SERIALS))  # never reused, unlike id()
    lock: threading.Lock = field(default_factory=threading.Lock)


def shape_of(sql: str) -> tuple[str, list[tuple[int, int]], list[str]] | None:
    """(shape key, literal spans, literal texts), or None for text that is always parsed in full."""
    if _UNSHAPED_RE.search(sql) or time_dependent(sql):  # a kept tree would keep today's date
        return None
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    texts: list[str] = []
    last = 0
    for m in _TOKENS.finditer(sql):
        kind = m.lastgroup
        if kind == "ident":
            continue
        start, end = span = m.span()
        parts.append(sql[last:start])
        parts.append("\0S" if kind == "string" else "\0N")
        spans.append(span)
        texts.append(sql[start:end])
        last = end
    parts.append(sql[last:])
    return "".join(parts).strip(), spans, texts


def _value(text: str) -> str:
    """A literal's value as sqlglot's tokenizer gives it: a string unquoted (`''` is one quote)."""
    return text[1:-1].replace("''", "'") if text.startswith("'") else text


def _substitutable(node: exp.Literal) -> bool:
    """Whether a literal sits where its value cannot change the parse (see the module docstring)."""
    parent = node.parent
    while isinstance(parent, (exp.Paren, exp.Neg)) or (
        isinstance(parent, exp.Cast) and parent.to.this == exp.DataType.Type.DATE
    ):
        parent = parent.parent
    return isinstance(parent, _SUBSTITUTED_PARENTS)


def _shape(root: exp.Select, spans: list[tuple[int, int]], texts: list[str]) -> _Shape:
    """The kept tree of a parsed query, its literals matched to the text's by character span."""
    by_span: dict[tuple[int, int], exp.Literal] = {}
    for node in root.find_all(exp.Literal):
        start, end = node.meta.get("start"), node.meta.get("end")
        if start is not None and end is not None:
            by_span[(start, end + 1)] = node
    literals: list[exp.Literal | None] = []
    for span in spans:
        found = by_span.get(span)
        literals.append(found if found is not None and _substitutable(found) else None)
    fixed = tuple((i, texts[i]) for i, node in enumerate(literals) if node is None)
    index = {id(node): i for i, node in enumerate(literals) if node is not None}
    where = root.args.get("where")
    places = (
        {}
        if where is None
        else {
            id(node): (j, tuple(index[id(lit)] for lit in node.find_all(exp.Literal) if id(lit) in index))
            for j, node in enumerate(conjuncts(where.this))
        }
    )
    inside = {i for _, held in places.values() for i in held}
    outside = tuple(i for i in index.values() if i not in inside)
    return _Shape(root, tuple(literals), fixed, places, outside)


def _set_literals(shape: _Shape, texts: list[str], which: Iterable[int]) -> None:
    """Write these literals' values (from the query's texts) into the kept tree."""
    for i in which:
        literal = shape.literals[i]
        assert literal is not None  # `which` names substitutable literals only
        literal.set("this", _value(texts[i]))


class _BoundConjuncts:
    """WHERE conjuncts bound before, by (shape, position, the texts of their literals) and the
    table's spec: `Binder.conjunct` depends on nothing else. An exploring analyst changes one
    condition at a time, and a dashboard's filters repeat, so most conjuncts of a new query were
    bound before (a third of a new query's planning time). Bounded; cleared when full."""

    def __init__(self, capacity: int = MAX_BOUND_CONJUNCTS) -> None:
        self._bound: dict[tuple, tuple[TableSpec, Bound]] = {}
        self.capacity = capacity

    def memo(self, shape: _Shape, texts: list[str]) -> ConjunctMemo:
        """Binds a conjunct of ``shape``'s tree for a query with these literal texts. A conjunct's
        literals are written into the tree only when it is bound afresh: a remembered one is not read."""

        def bind(binder: Binder, node: exp.Expr) -> Bound:
            place = shape.conjuncts.get(id(node))
            if place is None:  # not a conjunct of the kept tree (cannot happen): bind it in full
                _set_literals(shape, texts, (i for i, lit in enumerate(shape.literals) if lit is not None))
                return binder.conjunct(node)
            key = (shape.serial, place[0], tuple([texts[i] for i in place[1]]))
            known = self._bound.get(key)
            if known is not None and known[0] is binder.spec:
                return known[1]
            _set_literals(shape, texts, place[1])
            bound = binder.conjunct(node)
            if len(self._bound) >= self.capacity:
                self._bound.clear()
            self._bound[key] = (binder.spec, bound)
            return bound

        return bind


class PlanShapes:
    """Plans by shape: `plan` equals `engine.sql.bind.plan_query` for every statement (tests check)."""

    def __init__(self, capacity: int = MAX_SHAPES) -> None:
        self._shapes: OrderedDict[str, _Shape] = OrderedDict()
        self._conjuncts = _BoundConjuncts()
        self._lock = threading.Lock()
        self.capacity = capacity

    def plan(self, sql: str, lookup: Lookup) -> QueryPlan:
        shaped = shape_of(sql) if isinstance(sql, str) else None
        if shaped is None:
            return bind_select(parse_select(sql), lookup)
        key, spans, texts = shaped
        with self._lock:
            known = self._shapes.get(key)
        if known is None:
            root = parse_select(sql)
            plan = bind_select(root, lookup)  # an error is raised before anything is kept
            self._keep(key, _shape(root, spans, texts))
            return plan
        if all(texts[i] == text for i, text in known.fixed):
            with known.lock:
                _set_literals(known, texts, known.outside)  # WHERE's: by the memo, when read
                try:
                    return bind_select(known.root, lookup, self._conjuncts.memo(known, texts))
                except PrimaError:
                    pass  # planned again below, so the error quotes this text's own positions
        return bind_select(parse_select(sql), lookup)

    def _keep(self, key: str, shape: _Shape) -> None:
        with self._lock:
            self._shapes[key] = shape
            if len(self._shapes) > self.capacity:
                self._shapes.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._shapes.clear()
            self._conjuncts = _BoundConjuncts()

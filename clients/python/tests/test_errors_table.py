"""The error table of docs/clients.md, walked: every class it names exists with its parent,
an error answer of its status and code gets it, and nothing else is exported. The Node.js
client's tests walk the same table, so the two clients cannot name or nest their errors
differently."""

from __future__ import annotations

import builtins
import os
import re
from typing import Optional

import pytest

import mutexd
from mutexd import _errors
from mutexd_testserver import ROOT

DOC = os.path.join(ROOT, "docs", "clients.md")

# A code no client knows: the status alone must choose the class.
UNKNOWN_CODE = "some_code_of_a_newer_server"


def _rows(heading: str) -> list[list[str]]:
    """The cells of the table that starts with the header line ``heading``."""
    lines = open(DOC, encoding="utf-8").read().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, heading
    return rows


def _name(cell: str) -> str:
    m = re.fullmatch(r"`(\w+)`", cell)
    assert m, "not a class name: %r" % cell
    return m.group(1)


def table() -> list[tuple[str, str, str, str, str, str]]:
    out = []
    for status, code, py, py_parent, node, node_parent in _rows(
        "| status | code | Python | parent | Node.js | parent |"
    ):
        out.append((status, code, _name(py), _name(py_parent), _name(node), _name(node_parent)))
    return out


def answers(status: str, code: str) -> list[tuple[int, Optional[str]]]:
    """The (status, code) pairs an error answer of this row may have; none for the rows
    that are not error answers."""
    codes: list[Optional[str]] = re.findall(r"`(\w+)`", code)
    if code in ("any", "any other"):
        codes = [UNKNOWN_CODE, None]
    if re.fullmatch(r"\d{3}", status):
        statuses = [int(status)]
    elif status == "any other 5xx":
        statuses = [500, 502, 504]
    elif status == "any other":
        statuses = [402, 418]
    else:
        return []
    return [(s, c) for s in statuses for c in codes]


ROWS = table()


def test_the_table_has_every_row():
    assert len(ROWS) == 20
    assert len({r[2] for r in ROWS}) == len(ROWS) == len({r[4] for r in ROWS})


@pytest.mark.parametrize("row", ROWS, ids=[r[2] for r in ROWS])
def test_each_class_has_its_name_and_parent(row):
    status, code, name, parent, _, _ = row
    cls = getattr(mutexd, name)
    assert isinstance(cls, type) and issubclass(cls, BaseException)
    assert cls.__name__ == name
    assert cls.__bases__ == (getattr(mutexd, parent, None) or getattr(builtins, parent),)
    assert issubclass(cls, mutexd.MutexdError) or name == "MutexdError"
    for st, cd in answers(status, code):
        assert _errors.error_class(st, cd) is cls, (st, cd)


def test_every_exported_error_class_is_in_the_table():
    exported = {
        n for n in mutexd.__all__
        if isinstance(getattr(mutexd, n), type) and issubclass(getattr(mutexd, n), BaseException)
    }
    # The deprecated names of the other table are aliases, not classes of their own.
    in_table = {r[2] for r in ROWS}
    aliases = {n for n in exported if getattr(mutexd, n).__name__ != n}
    assert exported - aliases == in_table
    assert "is_retryable" in mutexd.__all__


def test_deprecated_names_are_the_same_classes():
    py_to_node: dict[str, str] = {r[2]: r[4] for r in ROWS}
    node_names = set(py_to_node.values())
    for old, language, now in _rows("| deprecated name | language | now |"):
        old, now = _name(old), _name(now)
        if language == "Python":
            assert getattr(mutexd, old) is getattr(mutexd, now)
            assert now in py_to_node
        else:
            assert language == "Node.js"
            assert now in node_names  # checked against the code by the Node.js tests


def test_is_retryable_follows_the_table():
    retryable = {"TransportError", "Timeout", "ProtocolError", "Unavailable", "TooManyWaiters",
                 "ServerError"}
    for _, _, name, _, _, _ in ROWS:
        cls = getattr(mutexd, name)
        exc = cls(500, None, "m") if issubclass(cls, mutexd.APIError) else cls("m")
        assert mutexd.is_retryable(exc) == (name in retryable), name

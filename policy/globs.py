"""IAM's wildcard patterns (`*` any run of characters, `?` exactly one, everything else literal) decided
exactly, as automata rather than by trying examples: whether a union of patterns matches every string
another pattern stands for (`role/a*`, `role/b*`, ... that together start with every character a role
name may start with name every role), and whether two patterns share a string (a Resource pattern that
names the policy's own ARN).

A target may also hold class tokens (CLASSES): one or more characters of a set, e.g. the characters an
IAM name or an account id is made of, so "every role" means every legal role name rather than every
string. Each pattern is a small nondeterministic automaton over its positions (a set of positions is a
bit mask); the alphabet is the literal characters of the patterns involved plus one symbol for every
other character (no pattern tells those apart), so the subset construction below is exact and small."""

from __future__ import annotations

import functools
import string
from collections import deque
from collections.abc import Iterable

OTHER = "\x00"  # every character that no pattern names literally
# Class tokens a target may use: one or more characters of the set.
DIGITS = "\ue000"
LOWER_WORD = "\ue001"  # regions and partitions: aws, us-east-1
NAME = "\ue002"  # resource names: IAM's name characters, paths and the separators ARNs use in names
CLASSES: dict[str, frozenset[str]] = {
    DIGITS: frozenset(string.digits),
    LOWER_WORD: frozenset(string.ascii_lowercase + string.digits + "-"),
    NAME: frozenset(string.ascii_letters + string.digits + "+=,.@_-/:"),
}


class _Automaton:
    """A pattern's positions as bits: bit i set means `pattern[:i]` has been matched."""

    def __init__(self, pattern: str, other_in: frozenset[str]):
        self.pattern = pattern
        self.other_in = other_in
        self.accept = 1 << len(pattern)
        # Positions from which whatever follows matches (a trailing run of `*`).
        self.universal = sum(1 << i for i in range(len(pattern)) if pattern[i:].strip("*") == "")
        self.start = self._closure(1)
        self._moves: dict[tuple[int, str], int] = {}

    def _closure(self, mask: int) -> int:
        """Add the positions reachable without reading: a `*` may match nothing."""
        for i, ch in enumerate(self.pattern):
            if mask >> i & 1 and ch == "*":
                mask |= 1 << (i + 1)
        return mask

    def step(self, mask: int, ch: str) -> int:
        key = (mask, ch)
        found = self._moves.get(key)
        if found is None:
            moved = 0
            for i, p in enumerate(self.pattern):
                if not mask >> i & 1:
                    continue
                if p == "*":
                    moved |= 1 << i
                elif p in CLASSES:
                    if ch in CLASSES[p] or (ch == OTHER and p in self.other_in):
                        moved |= 3 << i  # one more of the class, or on to what follows
                elif p == "?" or p == ch:
                    moved |= 1 << (i + 1)
            found = self._moves[key] = self._closure(moved)
        return found


@functools.cache
def _automaton(pattern: str, other_in: frozenset[str]) -> _Automaton:
    """One automaton per pattern (and meaning of OTHER), its transitions kept across every decision."""
    return _Automaton(pattern, other_in)


def _literals(*patterns: str) -> frozenset[str]:
    return frozenset(ch for p in patterns for ch in p if ch not in "*?" and ch not in CLASSES)


def _other_in(literals: frozenset[str]) -> frozenset[str]:
    """The classes with a character no pattern names (OTHER stands for it)."""
    return frozenset(token for token, chars in CLASSES.items() if chars - literals)


def _normal(pattern: str, case_sensitive: bool) -> str:
    return pattern if case_sensitive else pattern.lower()


def _alphabet(target: str, literals: frozenset[str]) -> list[str]:
    """The symbols that can move the target: its own literals, its classes' characters that some pattern
    names, and OTHER."""
    if "*" in target or "?" in target:
        return sorted(literals | {OTHER})  # any character moves it
    classes = frozenset().union(*(CLASSES[ch] for ch in set(target) if ch in CLASSES))
    own = _literals(target)
    return sorted(own | (literals & classes) | {OTHER})


@functools.cache
def _covered_by(target: str, union: tuple[str, ...]) -> bool:
    literals = _literals(target, *union)
    other_in = _other_in(literals)
    t = _automaton(target, other_in)
    us = [_automaton(p, other_in) for p in union]
    alphabet = _alphabet(target, literals)
    start = (t.start, tuple(u.start for u in us))
    seen = {start}
    todo = deque([start])
    while todo:
        tm, ums = todo.popleft()
        if any(m & u.universal for m, u in zip(ums, us, strict=True)):
            continue  # everything from here on is covered
        if tm & t.accept and not any(m & u.accept for m, u in zip(ums, us, strict=True)):
            return False
        for ch in alphabet:
            nt = t.step(tm, ch)
            if not nt:
                continue
            nxt = (nt, tuple(u.step(m, ch) for m, u in zip(ums, us, strict=True)))
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return True


def _literal_prefix(pattern: str) -> str:
    """What every string a pattern matches starts with: its characters before the first wildcard."""
    for i, ch in enumerate(pattern):
        if ch in "*?" or ch in CLASSES:
            return pattern[:i]
    return pattern


def covers(union: Iterable[str], target: str, case_sensitive: bool = True) -> bool:
    """Whether every string `target` matches is matched by at least one pattern of `union`."""
    patterns = tuple(sorted({_normal(p, case_sensitive) for p in union}))
    target = _normal(target, case_sensitive)
    # The common case decided at once: `prefix*` covers whatever starts with that prefix.
    start = _literal_prefix(target)
    for p in patterns:
        prefix = p.rstrip("*")
        if p != prefix and _literal_prefix(p) == prefix and start.startswith(prefix):
            return True
    return bool(patterns) and _covered_by(target, patterns)


@functools.cache
def _meet(a: str, b: str) -> bool:
    literals = _literals(a, b)
    other_in = _other_in(literals)
    x, y = _automaton(a, other_in), _automaton(b, other_in)
    alphabet = sorted(literals | {OTHER})
    start = (x.start, y.start)
    seen = {start}
    todo = deque([start])
    while todo:
        ma, mb = todo.popleft()
        if ma & x.accept and mb & y.accept:
            return True
        for ch in alphabet:
            nxt = (x.step(ma, ch), y.step(mb, ch))
            if nxt[0] and nxt[1] and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def overlap(a: str, b: str, case_sensitive: bool = True) -> bool:
    """Whether some string matches both patterns (either may hold class tokens)."""
    return _meet(_normal(a, case_sensitive), _normal(b, case_sensitive))

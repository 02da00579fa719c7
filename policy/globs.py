"""IAM's wildcard patterns (`*` any run of characters, `?` exactly one, everything else literal) decided
exactly, as automata rather than by trying examples: whether a union of patterns matches every string
another pattern stands for (`role/a*`, `role/b*`, ... that together start with every character a role
name may start with name every role), and whether two patterns share a string (a Resource pattern that
names the policy's own ARN).

A target may also hold class tokens (CLASSES): one or more characters of a set, e.g. the characters an
IAM name or an account id is made of, so "every role" means every legal role name rather than every
string. Each pattern is a small nondeterministic automaton over its positions; the alphabet is the
literal characters of the patterns involved plus one symbol for every other character (no pattern tells
those apart), so the subset construction below is exact and stays small."""

from __future__ import annotations

import functools
import string
from collections import deque

OTHER = "\x00"  # every character that no pattern names literally
States = frozenset[int]
# Class tokens a target may use: one or more characters of the set.
DIGITS = "\ue000"
LOWER_WORD = "\ue001"  # regions and partitions: aws, us-east-1
NAME = "\ue002"  # resource names: IAM's name characters, paths and the separators ARNs use in names
CLASSES: dict[str, frozenset[str]] = {
    DIGITS: frozenset(string.digits),
    LOWER_WORD: frozenset(string.ascii_lowercase + string.digits + "-"),
    NAME: frozenset(string.ascii_letters + string.digits + "+=,.@_-/:"),
}


@functools.cache
def _closure(pattern: str, states: States) -> States:
    """The positions reachable without reading a character: a `*` may match nothing."""
    found = set(states)
    todo = list(found)
    while todo:
        i = todo.pop()
        if i < len(pattern) and pattern[i] == "*" and i + 1 not in found:
            found.add(i + 1)
            todo.append(i + 1)
    return frozenset(found)


@functools.cache
def _step(pattern: str, states: States, ch: str, other_in: frozenset[str] = frozenset()) -> States:
    """The positions after reading `ch`; `other_in`: the class tokens OTHER is a member of."""
    moved = set()
    for i in states:
        if i >= len(pattern):
            continue
        p = pattern[i]
        if p == "*":
            moved.add(i)
        elif p in CLASSES:
            if ch in CLASSES[p] or (ch == OTHER and p in other_in):
                moved |= {i, i + 1}
        elif p == "?" or p == ch:
            moved.add(i + 1)
    return _closure(pattern, frozenset(moved))


def _start(pattern: str) -> States:
    return _closure(pattern, frozenset([0]))


@functools.cache
def _universal(pattern: str, states: States) -> bool:
    """Whether the pattern matches whatever follows from here (a trailing run of `*`)."""
    return any(i < len(pattern) and pattern[i:].strip("*") == "" for i in states)


def _accepts(pattern: str, states: States) -> bool:
    return len(pattern) in states


def _literals(*patterns: str) -> frozenset[str]:
    return frozenset(ch for p in patterns for ch in p if ch not in "*?" and ch not in CLASSES)


def _other_in(literals: frozenset[str]) -> frozenset[str]:
    """The classes with a character no pattern names (OTHER stands for it)."""
    return frozenset(token for token, chars in CLASSES.items() if chars - literals)


def _normal(pattern: str, case_sensitive: bool) -> str:
    return pattern if case_sensitive else pattern.lower()


@functools.cache
def _covered_by(target: str, union: tuple[str, ...]) -> bool:
    literals = _literals(target, *union)
    alphabet = sorted(literals | {OTHER})
    other_in = _other_in(literals)
    start = (_start(target), tuple(_start(p) for p in union))
    seen = {start}
    todo = deque([start])
    while todo:
        t, us = todo.popleft()
        if any(_universal(p, s) for p, s in zip(union, us, strict=True)):
            continue  # everything from here on is covered
        if _accepts(target, t) and not any(_accepts(p, s) for p, s in zip(union, us, strict=True)):
            return False
        for ch in alphabet:
            nt = _step(target, t, ch, other_in)
            if not nt:
                continue
            nxt = (nt, tuple(_step(p, s, ch) for p, s in zip(union, us, strict=True)))
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return True


def covers(union: tuple[str, ...] | list[str] | set[str], target: str, case_sensitive: bool = True) -> bool:
    """Whether every string `target` matches is matched by at least one pattern of `union`."""
    patterns = tuple(sorted({_normal(p, case_sensitive) for p in union}))
    return bool(patterns) and _covered_by(_normal(target, case_sensitive), patterns)


@functools.cache
def _meet(a: str, b: str) -> bool:
    literals = _literals(a, b)
    alphabet = sorted(literals | {OTHER})
    other_in = _other_in(literals)
    start = (_start(a), _start(b))
    seen = {start}
    todo = deque([start])
    while todo:
        sa, sb = todo.popleft()
        if _accepts(a, sa) and _accepts(b, sb):
            return True
        for ch in alphabet:
            nxt = (_step(a, sa, ch, other_in), _step(b, sb, ch, other_in))
            if nxt[0] and nxt[1] and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def overlap(a: str, b: str, case_sensitive: bool = True) -> bool:
    """Whether some string matches both patterns (either may hold class tokens)."""
    return _meet(_normal(a, case_sensitive), _normal(b, case_sensitive))

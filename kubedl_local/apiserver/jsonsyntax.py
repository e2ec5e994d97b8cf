"""Go's ``encoding/json`` syntax errors, for request bodies that are not JSON.

Why: the real server reports a malformed body with the message of Go's JSON scanner (``invalid character
'b' looking for beginning of object key string``, ``unexpected end of JSON input``), and clients and tests
match on it. orjson's messages are different, so when orjson refuses a body this small port of the
scanner's state machine (``encoding/json/scanner.go``) finds the first error the way Go does. It runs only
on bodies that already failed to parse.
"""

from __future__ import annotations

import re

_WS = b" \t\r\n"
_HEX = b"0123456789abcdefABCDEF"


def _quote_char(c: int) -> str:
    if c == ord("'"):
        return "'\\''"
    if c == ord('"'):
        return "'\"'"
    # Go: strconv.Quote(string(rune(c))) -- a byte above 0x7f is the rune U+00XX
    ch = chr(c)
    if ch.isprintable() and c != 0xAD:
        return f"'{ch}'"
    if c < 0x80:
        named = {0x07: "a", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t", 0x0B: "v"}
        return f"'\\{named[c]}'" if c in named else f"'\\x{c:02x}'"
    return f"'\\u{c:04x}'"


class _Error(Exception):
    pass


class _Scanner:
    """Consumes one JSON value; raises _Error with Go's message at the first invalid byte."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fail(self, context: str) -> _Error:
        if self.pos >= len(self.data):
            return _Error("unexpected end of JSON input")
        return _Error(f"invalid character {_quote_char(self.data[self.pos])} {context}")

    def peek(self) -> int | None:
        return self.data[self.pos] if self.pos < len(self.data) else None

    def skip_ws(self) -> None:
        while self.pos < len(self.data) and self.data[self.pos] in _WS:
            self.pos += 1

    def value(self) -> None:
        self.skip_ws()
        c = self.peek()
        if c == ord("{"):
            self.pos += 1
            self.obj()
        elif c == ord("["):
            self.pos += 1
            self.arr()
        elif c == ord('"'):
            self.pos += 1
            self.string()
        elif c is not None and (c == ord("-") or ord("0") <= c <= ord("9")):
            self.number()
        elif c in (ord("t"), ord("f"), ord("n")):
            self.literal()
        else:
            raise self.fail("looking for beginning of value")

    def obj(self) -> None:
        self.skip_ws()
        if self.peek() == ord("}"):
            self.pos += 1
            return
        while True:
            self.skip_ws()
            if self.peek() != ord('"'):
                raise self.fail("looking for beginning of object key string")
            self.pos += 1
            self.string()
            self.skip_ws()
            if self.peek() != ord(":"):
                raise self.fail("after object key")
            self.pos += 1
            self.value()
            self.skip_ws()
            c = self.peek()
            if c == ord(","):
                self.pos += 1
                continue
            if c == ord("}"):
                self.pos += 1
                return
            raise self.fail("after object key:value pair")

    def arr(self) -> None:
        self.skip_ws()
        if self.peek() == ord("]"):
            self.pos += 1
            return
        while True:
            self.value()
            self.skip_ws()
            c = self.peek()
            if c == ord(","):
                self.pos += 1
                continue
            if c == ord("]"):
                self.pos += 1
                return
            raise self.fail("after array element")

    def string(self) -> None:
        while True:
            c = self.peek()
            if c is None:
                raise self.fail("")
            if c == ord('"'):
                self.pos += 1
                return
            if c < 0x20:
                raise self.fail("in string literal")
            if c == ord("\\"):
                self.pos += 1
                e = self.peek()
                if e is None:
                    raise self.fail("")
                if e == ord("u"):
                    self.pos += 1
                    for _ in range(4):
                        h = self.peek()
                        if h is None:
                            raise self.fail("")
                        if h not in _HEX:
                            raise self.fail("in \\u hexadecimal character escape")
                        self.pos += 1
                    continue
                if e not in b'"\\/bfnrt':
                    raise self.fail("in string escape code")
            self.pos += 1

    def digits(self) -> int:
        start = self.pos
        while (c := self.peek()) is not None and ord("0") <= c <= ord("9"):
            self.pos += 1
        return self.pos - start

    def number(self) -> None:
        if self.peek() == ord("-"):
            self.pos += 1
            c = self.peek()
            if c is None or not ord("0") <= c <= ord("9"):
                raise self.fail("in numeric literal")
        if self.peek() == ord("0"):
            self.pos += 1
        else:
            self.digits()
        if self.peek() == ord("."):
            self.pos += 1
            if not self.digits():
                raise self.fail("after decimal point in numeric literal")
        if self.peek() in (ord("e"), ord("E")):
            self.pos += 1
            if self.peek() in (ord("+"), ord("-")):
                self.pos += 1
            if not self.digits():
                raise self.fail("in exponent of numeric literal")

    def literal(self) -> None:
        for word in (b"true", b"false", b"null"):
            if self.data[self.pos] == word[0]:
                self.pos += 1
                for expected in word[1:]:
                    if self.peek() != expected:
                        raise self.fail(f"in literal {word.decode()} (expecting {_quote_char(expected)})")
                    self.pos += 1
                return


def syntax_error(data: bytes) -> str | None:
    """Go's message for the first syntax error in ``data``, or None if it is valid JSON."""
    scanner = _Scanner(data)
    try:
        scanner.value()
        scanner.skip_ws()
        if scanner.pos < len(data):
            raise scanner.fail("after top-level value")
    except _Error as e:
        return str(e)
    return None


def summarize(data: bytes, limit: int = 30) -> str:
    """How the real server quotes a body it could not decode (``summarizeData``)."""
    if not data:
        return "<empty>"
    if data[:1] == b"{":
        text = data[:limit].decode("utf-8", "replace")
        return text + " ..." if len(data) > limit else text
    return data[:limit].hex() + (" ..." if len(data) > limit else "")


class _Pairs(dict[str, object]):
    """An object as parsed, keeping its keys in document order with repeats (``object_pairs_hook``)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


_KEY_END = re.compile(rb'"\s*:')


def _count_keys(value: object) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_count_keys(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_keys(v) for v in value)
    return 0


def may_repeat_keys(data: bytes, parsed: object) -> bool:
    """False when ``data`` certainly has no repeated key: every key ends in ``":`` in the text, so fewer
    such endings than parsed keys is impossible and as many means nothing collapsed (a string value
    containing ``":`` only makes this answer True, and the exact check run)."""
    return len(_KEY_END.findall(data)) != _count_keys(parsed)


def key_events(data: bytes) -> list[tuple[str, bool]] | None:
    """Every key of a JSON document in document order, as ``(path, repeated)``; None if it is not JSON.

    The real server reports duplicate fields with unknown ones, in the order it meets them
    (``unknown field "metadata.foo", duplicate field "metadata.name"``); Python's parsers keep the last
    value of a repeated key silently, so the keys are read again here with their repeats."""
    import json

    try:
        root = json.loads(data, object_pairs_hook=_Pairs)
    except ValueError:
        return None
    events: list[tuple[str, bool]] = []

    def walk(value: object, path: str) -> None:
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for key, item in value.pairs:
                child = f"{path}.{key}" if path else key
                events.append((child, key in seen))
                seen.add(key)
                walk(item, child)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    walk(root, "")
    return events

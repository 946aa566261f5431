"""The text the wire's statement routers match: a statement without surrounding blanks and its one
trailing ``;``. Routers then need no ``\\s*;?\\s*$`` tail, whose nested optional blanks back-tracked
polynomially (``SET TIME ZONE x`` + 1,500 spaces + ``!`` stalled the event loop 14 s); their inner
blanks are possessive (``\\s++``), so no pattern revisits a run of blanks."""

from __future__ import annotations


def statement_text(sql: str) -> str:
    text = sql.strip()
    return text[:-1].rstrip() if text.endswith(";") else text


def last_name(rest: str) -> tuple[str, str] | None:
    """(what comes before, the name) of a statement ending in a name — a ``"quoted""name"`` or a
    word — scanned from the end (a regex searching for it back-tracks over every start)."""
    rest = rest.rstrip()
    if rest.endswith('"'):
        at = len(rest) - 1
        while at > 0:
            at = rest.rfind('"', 0, at)
            if at < 0:
                return None
            if at == 0 or rest[at - 1] != '"':
                break
            at -= 1  # a doubled quote inside the name
        if at < 0 or len(rest) - at < 3:
            return None
        return rest[:at], rest[at:]
    at = len(rest)
    while at > 0 and (rest[at - 1].isalnum() or rest[at - 1] == "_"):
        at -= 1
    return (rest[:at], rest[at:]) if at < len(rest) else None

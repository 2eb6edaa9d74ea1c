"""Check a final answer against the task's expected answer.

Matching rules (the task's ``answer`` decides which applies):

- number, or a string that is one number (``"$1,234.5"``, ``"3.4%"``, ``"2.1 billion"``): the
  predicted answer's number must be within ``rel_tol`` *or* ``abs_tol`` of it. The predicted number
  is the answer itself when it is one number, else the LAST number in it ("AAPL closed at 187.42").
  Currency signs/codes, thousands commas and scale words are understood; a percentage also matches
  its fraction (``"3.4%"`` ~ ``0.034``).
- string: equal after normalising case, unicode, punctuation, articles and whitespace.
- boolean: yes/true/1 or no/false/0.
- list: the predicted answer is a JSON list or items separated by commas, semicolons, newlines or
  "and"; each expected item must match exactly one predicted item and none may be left over, in any
  order unless ``ordered=True``.
- object: the predicted answer must be a JSON object with the same keys and matching values.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

REL_TOL = 1e-2
ABS_TOL = 1e-2
MAX_ITEMS = 200

_SCALES = {
    "k": 1e3, "thousand": 1e3,
    "m": 1e6, "mn": 1e6, "million": 1e6,
    "b": 1e9, "bn": 1e9, "billion": 1e9,
    "t": 1e12, "tn": 1e12, "trillion": 1e12,
}  # fmt: skip
_NUMBER = re.compile(
    r"""
    (?<![\w.])
    (?P<sign>[-+\u2212])?
    \s?(?:[$\u20ac\u00a3\u00a5]\s?)?
    (?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)
    (?:\s?(?P<pct>%|percent\b)|(?:\s?(?P<word>thousand|million|billion|trillion)|(?P<scale>[kKmMbBtT]n?))(?!\w))?
    """,
    re.VERBOSE,
)
_CURRENCY_WORDS = re.compile(r"\b(?:usd|eur|gbp|jpy|dollars?|euros?|pounds?|yen|us\$)\b", re.IGNORECASE)
_WHOLE_NUMBER_FILLER = re.compile(r"[\s$\u20ac\u00a3\u00a5~\u2248.:,;]+")
_ITEM_SPLIT = re.compile(r"\s*(?:[;\n|]|,(?!\d{3}(?!\d)))\s*")
_AND_SPLIT = re.compile(r"\s*(?:,\s*)?\band\b\s*", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_TRUE = {"yes", "true", "1", "y", "correct"}
_FALSE = {"no", "false", "0", "n", "incorrect"}


@dataclass(frozen=True)
class Number:
    value: float
    percent: bool = False

    def candidates(self) -> tuple[float, ...]:
        return (self.value, self.value / 100) if self.percent else (self.value,)


def answer_matches(
    predicted: str,
    expected: Any,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = ABS_TOL,
    ordered: bool = False,
) -> bool:
    """Whether `predicted` (the text inside the answer tags) matches the task's `expected` answer."""
    if expected is None or predicted is None:
        return False
    predicted = str(predicted).strip()
    if isinstance(expected, bool):
        return _parse_bool(predicted) is expected
    if isinstance(expected, (int, float)):
        return _number_matches(predicted, Number(float(expected)), rel_tol, abs_tol)
    if isinstance(expected, (list, tuple)):
        return any(
            _items_match(split_items(predicted, split_and=split_and), list(expected), rel_tol, abs_tol, ordered)
            for split_and in (True, False)
        )
    if isinstance(expected, dict):
        return _object_matches(predicted, expected, rel_tol, abs_tol)
    expected_number = whole_number(str(expected))
    if expected_number is not None:
        return _number_matches(predicted, expected_number, rel_tol, abs_tol)
    return normalize_text(predicted) == normalize_text(str(expected))


def numbers_in(text: str) -> list[Number]:
    """Every number in `text`, in order, with currency, commas, percent and scale words resolved."""
    found = []
    for match in _NUMBER.finditer(text):
        try:
            value = float(match.group("num").replace(",", ""))
        except ValueError:
            continue
        if match.group("sign") in ("-", "\u2212"):
            value = -value
        scale = match.group("word") or match.group("scale")
        if scale:
            value *= _SCALES[scale.lower()]
        if math.isfinite(value):
            found.append(Number(value, percent=bool(match.group("pct"))))
    return found


def whole_number(text: str) -> Number | None:
    """The number `text` consists of (ignoring currency and filler), or None."""
    numbers = numbers_in(text)
    if len(numbers) != 1:
        return None
    rest = _NUMBER.sub(" ", _CURRENCY_WORDS.sub(" ", text), count=1)
    return numbers[0] if not _WHOLE_NUMBER_FILLER.sub("", rest) else None


def normalize_text(text: str) -> str:
    """Case-, unicode-, punctuation- and article-insensitive form of `text`."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch)[0] in "PSC" else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def split_items(text: str, *, split_and: bool = True) -> list[str]:
    """The items of a list answer: a JSON list, or text split on , ; newlines | (and "and")."""
    stripped = text.strip()
    value = _json_or_none(stripped)
    if not isinstance(value, list):
        wrapped = _json_or_none(f"[{stripped}]")  # '{"a":1}, {"b":2}': objects joined by commas
        value = wrapped if isinstance(wrapped, list) and any(isinstance(v, (dict, list)) for v in wrapped) else value
    if isinstance(value, list):
        return [_as_answer(v) for v in value[:MAX_ITEMS]]
    if stripped[:1] + stripped[-1:] in ("[]", "()", "{}"):
        stripped = stripped[1:-1]
    parts = _ITEM_SPLIT.split(stripped)
    if split_and:
        parts = [piece for part in parts for piece in _AND_SPLIT.split(part)]
    items = (_BULLET.sub("", part.strip()).strip(" \"'`") for part in parts)
    return [item for item in items if item][:MAX_ITEMS]


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _number_matches(predicted: str, expected: Number, rel_tol: float, abs_tol: float) -> bool:
    number = whole_number(predicted)
    if number is None:
        numbers = numbers_in(predicted)
        if not numbers:
            return False
        number = numbers[-1]
    return any(
        math.isclose(p, e, rel_tol=rel_tol, abs_tol=abs_tol)
        for p in number.candidates()
        for e in expected.candidates()
    )


def _parse_bool(text: str) -> bool | None:
    word = normalize_text(text)
    return True if word in _TRUE else False if word in _FALSE else None


def _items_match(items: list[str], expected: list[Any], rel_tol: float, abs_tol: float, ordered: bool) -> bool:
    if len(items) != len(expected) or len(expected) > MAX_ITEMS:
        return False

    def match(item: str, want: Any) -> bool:
        return answer_matches(item, want, rel_tol=rel_tol, abs_tol=abs_tol)

    if ordered:
        return all(match(item, want) for item, want in zip(items, expected))
    edges = [[i for i, item in enumerate(items) if match(item, want)] for want in expected]
    return _perfect_matching(edges, len(items))


def _perfect_matching(edges: list[list[int]], n_right: int) -> bool:
    """Kuhn's augmenting paths: tolerance makes "matches" non-transitive, so greedy is not enough."""
    owner = [-1] * n_right

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges[left]:
            if right not in seen:
                seen.add(right)
                if owner[right] == -1 or augment(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    return all(augment(left, set()) for left in range(len(edges)))


def _object_matches(predicted: str, expected: dict[str, Any], rel_tol: float, abs_tol: float) -> bool:
    value = _json_or_none(predicted)
    if not isinstance(value, dict):
        return False
    got = {normalize_text(str(k)): v for k, v in value.items()}
    want = {normalize_text(str(k)): v for k, v in expected.items()}
    if got.keys() != want.keys():
        return False
    return all(answer_matches(_as_answer(got[k]), want[k], rel_tol=rel_tol, abs_tol=abs_tol) for k in want)


def _as_answer(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)

"""Final-answer matching: numbers with tolerance, strings, booleans, lists and objects."""

import pytest

from mcprl.rewards.answers import answer_matches, normalize_text, numbers_in, split_items, whole_number


@pytest.mark.parametrize(
    "predicted, expected",
    [
        ("187.42", 187.42),
        ("$187.42", "187.42"),
        ("187.42 USD", 187.42),
        ("USD 187.42.", "$187.42"),
        ("1,234,567.5", 1234567.5),
        ("187.5", 187.42),  # within 1% relative
        ("0.105", 0.1),  # within 0.01 absolute
        ("3.45%", 0.0345),
        ("0.0345", "3.45%"),
        ("3.45 percent", 3.45),
        ("2.1 billion", 2.1e9),
        ("$2.1B", "2,100,000,000"),
        ("-12.5", -12.5),
        ("\u221212.5", -12.5),
        ("AAPL last traded at 187.42", 187.42),
        (" 42 ", 42),
    ],
)
def test_numbers_match_within_tolerance(predicted, expected):
    assert answer_matches(predicted, expected)


@pytest.mark.parametrize(
    "predicted, expected",
    [
        ("190", 187.42),
        ("12.5", -12.5),
        ("3.45", 0.0345),  # a plain number is not read as a percentage
        ("no idea", 187.42),
        ("", 187.42),
        ("187.42 then 200", 187.42),  # the last number is the answer
        ("2.1 million", 2.1e9),
    ],
)
def test_numbers_that_do_not_match(predicted, expected):
    assert not answer_matches(predicted, expected)


def test_tolerances_are_configurable():
    assert not answer_matches("187.5", 187.42, rel_tol=1e-6, abs_tol=1e-6)
    assert answer_matches("187.42", 187.42, rel_tol=0, abs_tol=0)
    assert answer_matches("200", 187.42, rel_tol=0.1)


@pytest.mark.parametrize(
    "predicted, expected, result",
    [
        ("Paris", "paris", True),
        ("  The  Beatles! ", "beatles", True),
        ("Café", "CAFÉ", True),
        ("new-york", "New York", True),
        ("Paris, France", "Paris", False),
        ("London", "Paris", False),
    ],
)
def test_strings_normalised(predicted, expected, result):
    assert answer_matches(predicted, expected) is result


@pytest.mark.parametrize("predicted, expected, result", [("Yes", True, True), ("false.", False, True), ("no", True, False), ("maybe", False, False)])
def test_booleans(predicted, expected, result):
    assert answer_matches(predicted, expected) is result


@pytest.mark.parametrize(
    "predicted, expected, result",
    [
        ("MSFT, AAPL and GOOG", ["AAPL", "GOOG", "MSFT"], True),
        ('["goog", "aapl"]', ["AAPL", "GOOG"], True),
        ("- AAPL\n- GOOG", ["GOOG", "AAPL"], True),
        ("Procter and Gamble; Apple", ["apple", "Procter and Gamble"], True),
        ("1,234, 5,678", [5678, 1234], True),
        ("AAPL, GOOG", ["AAPL", "GOOG", "MSFT"], False),
        ("AAPL, GOOG, MSFT", ["AAPL", "GOOG"], False),
        ("AAPL, AAPL", ["AAPL", "GOOG"], False),
        ("101.5, 100", [100.5, 101.9], True),  # greedy would pair 100.5 with 101.5 and fail
    ],
)
def test_lists_as_sets(predicted, expected, result):
    assert answer_matches(predicted, expected) is result


def test_ordered_lists():
    assert answer_matches("AAPL, GOOG", ["AAPL", "GOOG"], ordered=True)
    assert not answer_matches("GOOG, AAPL", ["AAPL", "GOOG"], ordered=True)


def test_objects():
    assert answer_matches('{"Ticker": "aapl", "price": 187.4}', {"ticker": "AAPL", "price": 187.42})
    assert not answer_matches('{"ticker": "AAPL"}', {"ticker": "AAPL", "price": 187.42})
    assert not answer_matches("AAPL 187.42", {"ticker": "AAPL"})
    assert answer_matches('{"t":"B","p":2}, {"t":"A","p":1}', [{"t": "A", "p": 1}, {"t": "B", "p": 2}])


def test_nothing_to_match_against():
    assert not answer_matches("anything", None)
    assert not answer_matches(None, "x")


def test_helpers():
    assert [n.value for n in numbers_in("from 2020-2021, up 5% to $1,200")] == [2020, 2021, 5, 1200]
    assert numbers_in("5%")[0].percent
    assert whole_number("$1,200.00") is not None and whole_number("1,200 shares") is None
    assert normalize_text("  The Quick, brown FOX!! ") == "quick brown fox"
    assert split_items("[a, b]") == ["a", "b"]

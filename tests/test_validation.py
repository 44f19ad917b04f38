"""The one pydantic formatter (engine/validation.py): our words, pydantic's, and a long list cut."""

import pytest
from pydantic import BaseModel, ValidationError

from rlab.engine.validation import located, one_line, problems


class _Pair(BaseModel):
    a: int
    b: list[int]


def _error(value: dict) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Pair.model_validate(value)
    return caught.value


def test_each_problem_has_our_words_and_pydantic_s():
    [missing, bad] = problems(_error({"b": [1, "x"]}))
    assert (missing.key, missing.kind, missing.rule, missing.message) == ("a", "missing", "required", "Field required")
    assert bad.loc == ("b", 1) and bad.fields == ("b",) and bad.key == "b.1"
    assert bad.rule.startswith("must be a valid integer") and bad.message.startswith("Input should be")


def test_one_line_names_at_most_some_problems_and_counts_the_rest():
    err = _error({"b": ["x", "y", "z"]})
    assert one_line(err, located) == ("a: required; b.0: must be a valid integer, unable to parse string as an "
                                      "integer; b.1: must be a valid integer, unable to parse string as an integer; "
                                      "b.2: must be a valid integer, unable to parse string as an integer")
    assert one_line(err, located, most=1) == "a: required; and 3 more"
    assert one_line(err, located, most=4) == one_line(err, located)

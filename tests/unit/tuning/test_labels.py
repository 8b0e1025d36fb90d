"""Labels on Turn records: what counts as labelled, and one-line errors for bad label fields."""

from __future__ import annotations

import pytest

from pipeline.tuning.labels import LabelError, Labels, labels_from_line, labels_from_object


def test_expected_and_acceptable_are_read_as_sets() -> None:
    labels = labels_from_object({"expected_slugs": ["people/a", "people/a", "x"], "acceptable_slugs": ["y"]})
    assert labels == Labels(frozenset({"people/a", "x"}), frozenset({"y"}))
    assert labels.allowed == {"people/a", "x", "y"}


def test_a_record_without_label_fields_is_unlabelled() -> None:
    assert labels_from_object({"session_id": "s", "text": "hi"}) is None
    assert labels_from_object({"expected_slugs": None, "acceptable_slugs": None}) is None


def test_an_empty_expected_list_labels_a_turn_that_should_stay_silent() -> None:
    assert labels_from_object({"expected_slugs": []}) == Labels(frozenset())


def test_acceptable_alone_labels_the_turn_with_nothing_expected() -> None:
    assert labels_from_object({"acceptable_slugs": ["a"]}) == Labels(frozenset(), frozenset({"a"}))


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"expected_slugs": "people/a"}, "field 'expected_slugs' must be a list of slugs (strings), got str"),
        ({"expected_slugs": ["a", 3]}, "field 'expected_slugs' item 1 must be a non-empty slug string, got int"),
        ({"acceptable_slugs": [""]}, "field 'acceptable_slugs' item 0 must be a non-empty slug string, got an empty string"),
        ({"expected_slugs": {"a": 1}}, "field 'expected_slugs' must be a list of slugs (strings), got dict"),
    ],
)
def test_bad_label_fields_raise_one_line_errors(obj: dict[str, object], message: str) -> None:
    with pytest.raises(LabelError) as info:
        labels_from_object(obj)
    assert info.value.message == message
    assert info.value.code == "bad_label"
    assert "\n" not in str(info.value)


def test_lines_that_are_not_json_objects_carry_no_labels() -> None:
    assert labels_from_line(b"{not json") is None
    assert labels_from_line(b"[1, 2]") is None
    assert labels_from_line(b'{"session_id": "s", "expected_slugs": ["a"]}') == Labels(frozenset({"a"}))

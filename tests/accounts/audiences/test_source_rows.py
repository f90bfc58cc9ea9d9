"""``abm_provider.accounts.audiences.source_rows``: a source's rows read through Python in chunks,
and their values as the text columns of a work table take them."""

from __future__ import annotations

from collections.abc import Iterator

from abm_provider.accounts.audiences.source_rows import chunks, texts, value_of


def test_rows_come_in_chunks_of_at_most_the_size_the_last_holding_the_rest() -> None:
    assert list(chunks(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunks([], 3)) == []


def test_rows_are_read_lazily_one_chunk_at_a_time() -> None:
    read: list[int] = []

    def rows() -> Iterator[int]:
        for n in range(10):
            read.append(n)
            yield n

    first = next(chunks(rows(), 4))
    assert first == [0, 1, 2, 3]
    assert read == [0, 1, 2, 3]


def test_values_are_text_in_column_order_and_none_stays_null() -> None:
    row = {"b": 2, "a": "x", "c": None}
    assert texts(row, ["a", "b", "c", "missing"]) == ["x", "2", None, None]
    assert texts(["not", "a", "mapping"], ["a"]) == [None]


def test_a_value_is_read_from_a_mapping_only() -> None:
    assert value_of({"id": "001"}, "id") == "001"
    assert value_of(("001",), "id") is None

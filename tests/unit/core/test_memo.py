"""The per-turn memos rest when they do not pay, and come back (pipeline/core/memo.py)."""

from __future__ import annotations

from pipeline.core.memo import Memo


def test_a_memo_that_pays_keeps_its_entries() -> None:
    memo: Memo[int, str] = Memo(4)
    for key in range(4):
        memo.put(key, str(key))
    assert [memo.get(key) for key in range(4)] == ["0", "1", "2", "3"]
    memo.put(9, "9")  # full, with 4 hits of 4: starts over but does not rest
    assert memo.resting == 0
    assert memo.get(9) == "9"


def test_a_memo_without_hits_rests_then_tries_again() -> None:
    memo: Memo[int, int] = Memo(8)
    for key in range(9):  # the ninth store finds it full with no hit
        memo.put(key, key)
    assert memo.resting == 32
    assert len(memo) == 0
    assert memo.get(3) is None
    for key in range(32):  # resting: stores are dropped, one rest step each
        memo.put(100 + key, key)
    assert len(memo) == 0 and memo.resting == 0
    memo.put(7, 7)
    assert memo.get(7) == 7


def test_clear_ends_the_rest() -> None:
    memo: Memo[int, int] = Memo(1)
    memo.put(1, 1)
    memo.put(2, 2)
    assert memo.resting == 4
    memo.clear()
    memo.put(3, 3)
    assert memo.get(3) == 3


def test_rest_one_counts_a_store_only_while_resting() -> None:
    memo: Memo[int, int] = Memo(4)
    assert not memo.rest_one()  # active: nothing counted, the caller stores as usual
    memo.resting = 2
    assert memo.rest_one() and memo.resting == 1
    assert memo.rest_one() and memo.resting == 0
    assert not memo.rest_one()
    memo.put(1, 1)
    assert memo.get(1) == 1


def test_the_try_after_a_rest_is_a_short_trial() -> None:
    memo: Memo[int, int] = Memo(16)
    for key in range(17):  # full without a hit: rests for 64 stores
        memo.put(key, key)
    for key in range(64):
        memo.put(100 + key, key)
    assert memo.resting == 0 and memo.limit == 2
    memo.put(1, 1)
    memo.put(2, 2)
    memo.put(3, 3)  # two stores of the trial, no hit: rests again without storing
    assert memo.resting == 64 and len(memo) == 0
    assert memo.get(1) is None


def test_a_trial_that_pays_makes_a_full_memo_again() -> None:
    memo: Memo[int, int] = Memo(16)
    for key in range(17):
        memo.put(key, key)
    memo.resting = 0  # the rest is over
    memo.put(1, 1)
    memo.put(2, 2)
    assert memo.get(1) == 1
    memo.put(3, 3)  # one hit in a trial of two stores: passes, entries kept
    assert memo.resting == 0 and memo.limit == 16
    assert [memo.get(k) for k in (1, 2, 3)] == [1, 2, 3]


def test_clear_ends_a_trial_too() -> None:
    memo: Memo[int, int] = Memo(16)
    for key in range(17):
        memo.put(key, key)
    memo.clear()
    assert memo.limit == 16 and memo.resting == 0

"""The near-linear lifting and encoding of ``sipe_fairseq.hexatag`` against the reference (the old
code, kept in tests/hexatag_reference.py): the same lifted trees, lift counts and tags."""
import os
import random
import time
from pathlib import Path

import pytest

import hexatag_reference as ref
from sipe_fairseq.hexatag import (
    check_tree, encode, encode_tree, is_projective, nonprojective_arcs, projectivize, read_conllu,
)
from sipe_fairseq.hexatag.errors import NonProjectiveError, TreeError

SHARED = Path(os.environ.get("SIPE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
EWT = SHARED / "data" / "ud-english-ewt"
EWT_NONPROJECTIVE = {"train": 288, "dev": 31, "test": 26}


def random_tree(n, rng):
    """Any tree, typically highly non-projective: words in a random order, each attached to a word placed before it."""
    order = list(range(1, n + 1))
    rng.shuffle(order)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k] - 1] = order[rng.randrange(k)]
    return heads


def random_heads_tree(n, rng):
    """Random heads (redrawn until they form a tree): mostly shallow, long arcs."""
    while True:
        root = rng.randrange(1, n + 1)
        heads = [0 if i == root else rng.choice([h for h in range(1, n + 1) if h != i]) for i in range(1, n + 1)]
        try:
            ref.check_tree(heads)
            return heads
        except ValueError:
            continue


def chain_tree(n, rng):
    """A random chain (depth n) with a few words re-attached anywhere above them: deep lifts."""
    order = list(range(1, n + 1))
    rng.shuffle(order)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k] - 1] = order[k - 1 if rng.random() < 0.8 else rng.randrange(k)]
    return heads


def nearly_projective_tree(n, rng):
    """A projective tree (random nested spans) with two words swapped: few crossing arcs."""
    heads = [0] * n

    def build(lo, hi, parent):
        h = rng.randint(lo, hi)
        heads[h - 1] = parent
        for a, b in ((lo, h - 1), (h + 1, hi)):
            while a <= b:
                end = rng.randint(a, b)
                build(a, end, h)
                a = end + 1

    build(1, n, 0)
    i, j = rng.randrange(n), rng.randrange(n)
    perm = list(range(n + 1))
    perm[i + 1], perm[j + 1] = perm[j + 1], perm[i + 1]
    out = [0] * n
    for w, h in enumerate(heads, 1):
        out[perm[w] - 1] = perm[h]
    return out


def hung_chain_tree(n, rng=None):
    """The costliest case known: a chain 1 <- 2 <- ... <- m (the root m = n // 2) and the words after it hung
    below its deepest word 1; each climbs the whole chain, one lift per level: about n * n / 4 lifts."""
    m = n // 2
    return [i + 1 for i in range(1, m)] + [0] + [1] * (n - m)


def assert_same(heads):
    expected = ref.encode_tree(heads)
    assert encode_tree(heads) == expected, heads
    assert projectivize(heads) == ref.projectivize(heads), heads
    assert nonprojective_arcs(heads) == ref.nonprojective_arcs(heads), heads
    assert is_projective(heads) == ref.is_projective(heads), heads
    assert encode(expected[1]) == ref.encode(expected[1]), heads
    return expected[2]


@pytest.mark.parametrize("make", [random_tree, random_heads_tree, chain_tree, nearly_projective_tree])
def test_same_as_reference_on_random_trees(make):
    rng = random.Random(make.__name__)
    lifted = 0
    for k in range(1200):
        n = rng.randint(1, 12) if k < 1000 else rng.randint(13, 30)
        lifted += assert_same(make(n, rng)) > 0
    assert lifted > (50 if make is nearly_projective_tree else 400)  # the comparison covered many lifted trees


def test_same_as_reference_on_large_trees():
    rng = random.Random(7)
    assert assert_same(hung_chain_tree(40)) == 19 * 20
    for n in (60, 100):
        for make in (random_tree, chain_tree, random_heads_tree):
            assert assert_same(make(n, rng)) > 0


def test_strict_names_the_same_arcs():
    rng = random.Random(3)
    for _ in range(300):
        heads = random_tree(rng.randint(3, 20), rng)
        bad = ref.nonprojective_arcs(heads)
        if bad:
            with pytest.raises(NonProjectiveError) as new:
                encode_tree(heads, strict=True)
            with pytest.raises(NonProjectiveError) as old:
                ref.projectivize(heads, strict=True)
            assert str(new.value) == str(old.value) == f"non-projective arcs into words {bad}"


def test_long_nonprojective_sentence_is_fast():
    """2,000 words, thousands of lifts: the reference takes minutes (about cubic), this well under a second
    on a quiet machine; the bound leaves room for a loaded one."""
    heads = random_tree(2000, random.Random(2000))
    start = time.process_time()
    tags, proj, lifts = encode_tree(heads)
    assert time.process_time() - start < 5.0
    assert lifts > 1000 and ref.is_projective(proj) and len(tags) == 2000
    start = time.process_time()
    tags, proj, lifts = encode_tree(hung_chain_tree(2000))
    assert time.process_time() - start < 5.0
    assert lifts == 999 * 1000 and proj == [i + 1 for i in range(1, 1000)] + [0] + [1000] * 1000


@pytest.mark.parametrize("split", EWT_NONPROJECTIVE)
def test_same_as_reference_on_ewt(split):
    path = EWT / f"en_ewt-ud-{split}.conllu"
    if not path.exists():
        pytest.skip(f"{path} not present (../shared, or SIPE_SHARED, holds UD English EWT only in the developers' workspace)")
    nonprojective = 0
    for sent in read_conllu(path):
        expected = ref.encode_tree(sent.heads)
        assert encode_tree(sent.heads) == expected, sent.sent_id
        nonprojective += expected[2] > 0
    assert nonprojective == EWT_NONPROJECTIVE[split]


def _tree_error(check, heads):
    try:
        check(heads)
    except TreeError as e:
        return str(e)
    return None


def test_check_tree_same_verdicts_and_messages():
    """Random head vectors (mostly not trees: several roots, cycles, heads out of range or on themselves)."""
    rng = random.Random(5)
    verdicts = {}
    for _ in range(4000):
        n = rng.randint(1, 9)
        heads = [rng.randint(-1 if rng.random() < 0.05 else 0, n + (rng.random() < 0.05)) for _ in range(n)]
        expected = _tree_error(ref.check_tree, heads)
        assert _tree_error(check_tree, heads) == expected, heads
        key = expected.split(" ")[0] if expected else "tree"
        verdicts[key] = verdicts.get(key, 0) + 1
    assert set(verdicts) == {"tree", "word", "expected", "cycle"} and min(verdicts.values()) > 50, verdicts

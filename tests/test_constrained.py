"""Constrained hexatag decoding: its feasible set is exactly what ``decode`` accepts."""
import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS, HexatagError, decode, encode
from sipe_fairseq.hexatag.constrained import constrained_decode, constrained_decode_with_score, is_valid


def all_sequences(n):
    for ts in itertools.product(TERMINALS, repeat=n):
        for ns in itertools.product(NONTERMINALS, repeat=n):
            yield list(zip(ts, ns))


def decodes(tags):
    try:
        decode(tags)
    except HexatagError:
        return False
    return True


def onehot_scores(tags, other=-1.0):
    term = [[0.0 if t == x else other for x in TERMINALS] for t, _ in tags]
    nont = [[0.0 if nt == x else other for x in NONTERMINALS] for _, nt in tags]
    return term, nont


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_feasible_set_equals_decodable(n):
    """For every sequence of length n: the automaton accepts it iff ``decode`` does, and the DP
    reaches it (one-hot scores give it score 0, the maximum) iff it is valid."""
    n_valid = 0
    for k, tags in enumerate(all_sequences(n)):
        ok = decodes(tags)
        n_valid += ok
        assert is_valid(tags) == ok, tags
        # the DP on one-hot scores: exhaustive for n <= 4, a deterministic sample for n = 5
        if n <= 4 or ok or k % 7 == 0:
            best, score = constrained_decode_with_score(*onehot_scores(tags))
            assert decodes(best)
            if ok:
                assert best == tags and score == 0.0
            else:
                assert score < 0
    assert n_valid > 0


def test_encoded_trees_are_recovered():
    """Every encoded tree is valid, and one-hot scores on it give it back."""
    for heads in ([0], [2, 0], [0, 1], [3, 3, 0, 3, 3], [2, 0, 2, 5, 3]):
        tags = encode(heads)
        assert is_valid(tags)
        term, nont = onehot_scores(tags)
        assert constrained_decode(term, nont) == tags


def brute_force(term, nont):
    n = len(term)
    best = -math.inf
    for tags in all_sequences(n):
        if decodes(tags):
            s = sum(term[i][TERMINALS.index(t)] + nont[i][NONTERMINALS.index(nt)] for i, (t, nt) in enumerate(tags))
            best = max(best, s)
    return best


scores = st.floats(min_value=-20, max_value=0, allow_nan=False)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(st.lists(scores, min_size=2, max_size=2), min_size=n, max_size=n),
    st.lists(st.lists(scores, min_size=5, max_size=5), min_size=n, max_size=n))))
def test_dp_score_equals_brute_force(mats):
    term, nont = mats
    tags, score = constrained_decode_with_score(term, nont)
    assert decodes(tags)
    recomputed = sum(term[i][TERMINALS.index(t)] + nont[i][NONTERMINALS.index(nt)] for i, (t, nt) in enumerate(tags))
    assert score == pytest.approx(recomputed)
    assert score == pytest.approx(brute_force(term, nont))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2 ** 32 - 1))
def test_random_scores_give_trees(n, seed):
    rng = random.Random(seed)
    term = [[rng.gauss(0, 3) for _ in TERMINALS] for _ in range(n)]
    nont = [[rng.gauss(0, 3) for _ in NONTERMINALS] for _ in range(n)]
    heads = decode(constrained_decode(term, nont))
    assert len(heads) == n and heads.count(0) == 1


def test_neg_inf_and_inputs():
    # every tag forbidden: still a valid sequence
    inf = float("-inf")
    tags, score = constrained_decode_with_score([[inf, inf]] * 3, [[inf] * 5] * 3)
    assert decodes(tags) and score == inf
    # an unconstrained argmax would pick r/R1 everywhere; the DP must not
    tags = constrained_decode([[-5.0, 0.0]] * 4, [[-5, -5, -5, 0.0, -1]] * 4)
    assert decodes(tags) and tags[0][0] == "l" and tags[-1][1] == "EOS"
    with pytest.raises(ValueError):
        constrained_decode([], [])
    with pytest.raises(ValueError):
        constrained_decode([[0.0, 0.0]], [[0.0] * 4])


def test_numpy_input():
    np = pytest.importorskip("numpy")
    heads = [2, 0, 2, 5, 3]
    term, nont = onehot_scores(encode(heads), other=-3.0)
    assert decode(constrained_decode(np.array(term), np.array(nont))) == heads


def test_no_heavy_imports():
    import subprocess
    import sys
    code = ("import sys, sipe_fairseq.hexatag.constrained as c; "
            "assert not {'torch', 'fairseq', 'numpy'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------- incremental prefix check
def test_prefix_check_matches_brute_force():
    """Against every decodable sequence of up to MAX words (``decode`` only): for every prefix P
    and pair p, ``allowed_pairs`` with a bound on the words that may follow allows p iff some
    decodable sequence of at most MAX words starts with P + p; unbounded, for prefixes short
    enough that MAX words suffice to close them; ``words_left=0`` allows exactly the pairs that
    end a decodable sequence; ``prefix_state`` is CLOSED iff ``decode`` accepts the sequence."""
    from sipe_fairseq.hexatag.constrained import CLOSED, PAIRS, START, allowed_pairs, prefix_state

    max_words = 5
    valid = [tuple(tags) for n in range(1, max_words + 1) for tags in all_sequences(n) if decodes(tags)]
    prefixes = {}  # prefix -> set of next pairs seen in some valid sequence
    for seq in valid:
        for k in range(len(seq)):
            prefixes.setdefault(seq[:k], set()).add(seq[k])
    assert len(PAIRS) == 10 and prefix_state([]) == START
    checked = 0
    for k in range(max_words):
        for prefix in itertools.product(PAIRS, repeat=k):
            state = prefix_state(prefix)
            if prefix not in prefixes:
                # not the start of any valid sequence of <= max_words (unbounded: no sequence at all
                # for k <= 1; longer prefixes may be valid but too deep to close in time)
                if k <= 1 or state is None or state == CLOSED:
                    assert state is None or state == CLOSED, prefix
                else:
                    assert state > max_words - k, prefix
                continue
            assert state is not None and state != CLOSED, prefix
            bounded = set(allowed_pairs(state, words_left=max_words - k - 1))
            assert bounded == prefixes[prefix], prefix
            last = {p for p in PAIRS if decodes(list(prefix) + [p])}
            assert set(allowed_pairs(state, words_left=0)) == last, prefix
            if k <= 1:  # any open prefix of <= 2 words closes within max_words
                assert set(allowed_pairs(state)) == bounded, prefix
            checked += 1
    assert checked == len(prefixes)
    for n in range(1, max_words + 1):
        for tags in all_sequences(n):
            assert (prefix_state(tags) == CLOSED) == decodes(tags), tags
    assert allowed_pairs(CLOSED) == ()

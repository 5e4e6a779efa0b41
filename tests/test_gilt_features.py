"""GiLT feature tape against hand-computed values (docs/gilt-reference.md section 3)."""
import numpy as np

from sipe_fairseq.data.gilt.graph_features import GraphTape, pair_features, sentence_tape

# arcs: root->2, 2->1, 2->4, 4->3; owned by the later endpoint:
WORDS = [([], []), ([0], [1]), ([], []), ([2], [3])]
# rows by hand (columns: nodes 0..4), see the derivation in each comment
DEGREE = [[0, 0, 0, 0, 0],
          [10, 1, 11, 0, 0],       # root out 1; 1 in 1; 2 out 1 (to 1) + in 1 (root)
          [10, 1, 11, 0, 0],       # word 3 arrives without arcs
          [10, 1, 21, 1, 11]]      # 2 gains an out arc (to 4); 4 out 1 (to 3) + in 1; 3 in 1
DEPTH = [[1, 0, 0, 0, 0],          # word 1 is not connected to the root yet
         [1, 3, 2, 0, 0],
         [1, 3, 2, 0, 0],          # 3 unconnected
         [1, 3, 2, 4, 3]]
DISTANCE = [[0, 0, 0, 0, 0],       # from 1: nothing reachable, self 0
            [1, 10, 0, 0, 0],      # from 2: up to root 1, down to 1 costs 10
            [0, 0, 0, 0, 0],       # from 3: isolated
            [2, 11, 1, 10, 0]]     # from 4: up to 2 (1), root (1+1), 1 (1+10), down to 3 (10)


def test_tape_by_hand():
    tape = sentence_tape(WORDS)
    assert tape.shape == (4, 5, 3) and tape.dtype == np.uint8
    assert tape[:, :, 0].tolist() == DEGREE
    assert tape[:, :, 1].tolist() == DEPTH
    assert tape[:, :, 2].tolist() == DISTANCE


def test_clipping():
    # word 16 heads words 1..15 and hangs from the root: degree 10 * 15 + 1 = 151 -> 150
    words = [([], [])] * 15 + [([0], list(range(1, 16)))]
    row = sentence_tape(words)[-1]
    assert row[16, 0] == 150 and row[0, 0] == 10 and row[1, 0] == 1
    # a chain w -> w-1: from word 17 down to word 1 costs 16 * 10 = 160 -> 150; to word 2: 150
    chain = [([], [])] + [([], [w - 1]) for w in range(2, 18)]
    row = sentence_tape(chain)[-1]
    assert row[1, 2] == 150 and row[2, 2] == 150 and row[3, 2] == 140 and row[16, 2] == 10
    assert row[0, 1] == 1 and row[5, 1] == 0  # no root arc: only the root has a depth


def test_several_heads_and_cycles():
    # 1 <- 2 and 2 <- 1 (a cycle through a later arc) and root -> 1
    words = [([0], []), ([1], [1])]
    row = sentence_tape(words, two_way="cheaper")[-1]
    assert row[:, 0].tolist() == [10, 1 + 10 + 1, 10 + 1]  # 1: in root + in 2, out to 2; 2: out 1 + in 1
    assert row[:, 2].tolist() == [2, 1, 0]  # 2 -> 1 either way costs 1 (dependent -> head of arc 1->2)


def test_causality_and_pairs():
    tape = sentence_tape(WORDS)
    # row w only depends on words <= w: the tape of a prefix equals the prefix of the tape
    for k in range(1, 5):
        assert np.array_equal(sentence_tape(WORDS[:k]), tape[:k, : k + 1])
    pf = pair_features(tape)
    assert pf.shape == (5, 5, 3)
    assert not pf[0].any() and not pf[:, 0].any()  # positions of no word
    assert pf[2, 4].sum() == 0 and pf[4, 2].tolist() == [21, 2, 1]  # later keys are 0; row 4, node 2


def test_incremental_copy():
    g = GraphTape(1)
    g.add_word([0], [])
    h = g.copy()
    g.add_word([1], [])
    # rows degree, depth, distance over nodes 0..2; g's word 2 (head 1) is not in the copy
    assert h.add_word([], [1]).tolist() == [[10, 2, 10], [1, 2, 3], [11, 10, 0]]

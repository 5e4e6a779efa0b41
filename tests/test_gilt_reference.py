"""GiLT as the authors' code builds it (cookie-pie-oops/GiLT-LM, src/; docs/gilt-reference.md): the distance of a
pair with arcs both ways, the arc scorer's input (no state before position 0; GiLT-GPT2's order), the feature
tables' init, Transformer-XL's shared u and v, the unscaled embedding, and the post-training parameter groups."""
import random

import numpy as np
import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.data.gilt_dataset import block_graph  # noqa: E402
from sipe_fairseq.data.graph_features import HEAD_TO_DEP, DEP_TO_HEAD, MAX_VALUE, GraphTape, sentence_tape  # noqa: E402
from sipe_fairseq.modules.arc_scorer import word_inputs  # noqa: E402

TWO_WORDS = [([0], []), ([1], [1])]  # root -> 1, 1 -> 2 and 2 -> 1: arcs both ways between words 1 and 2


# --- distance of two words with arcs both ways -------------------------------------------------------------------

def test_two_way_pair_later_head_by_default():
    """The authors' adjacency matrix: word 2's arc to its head 1 is written (1->2: 10, 2->1: 1), then its arc to
    its dependent 1 overwrites both entries (2->1: 10, 1->2: 1). From 2: to 1 costs 10, to the root 10 + 1."""
    row = sentence_tape(TWO_WORDS)[-1]
    assert row[:, 2].tolist() == [11, 10, 0]
    cheaper = sentence_tape(TWO_WORDS, two_way="cheaper")[-1]
    assert cheaper[:, 2].tolist() == [2, 1, 0]
    assert row[:, :2].tolist() == cheaper[:, :2].tolist()  # degree and depth count both arcs under either rule
    # from the earlier word's side (a third word reaching 1 and 2 through 1): 1 -> 2 costs 1 under both rules
    three = TWO_WORDS + [([1], [])]
    assert sentence_tape(three)[-1][:, 2].tolist() == [2, 1, 2, 0]
    with pytest.raises(ValueError, match="two-way distance rule"):
        GraphTape(two_way="min")


def _authors_distances(words):
    """Distance rows built the authors' way: one adjacency matrix over the sentence, filled word by word (the arcs
    to heads, then the arcs to dependents, each writing both directions), then shortest paths from the newest word
    over nodes 0..w (Floyd-Warshall here; 0 = no edge), unreachable and self 0."""
    n = len(words)
    adj = np.zeros((n + 1, n + 1))
    for w, (heads, deps) in enumerate(words, 1):
        for h in heads:
            adj[h, w], adj[w, h] = HEAD_TO_DEP, DEP_TO_HEAD
        for d in deps:
            adj[w, d], adj[d, w] = HEAD_TO_DEP, DEP_TO_HEAD
    rows = []
    for w in range(1, n + 1):
        dist = np.where(adj[: w + 1, : w + 1] > 0, adj[: w + 1, : w + 1], np.inf)
        np.fill_diagonal(dist, 0)
        for k in range(w + 1):
            dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
        d = dist[w]
        rows.append(np.clip(np.where(np.isfinite(d), d, 0), 0, MAX_VALUE).astype(int).tolist() + [0] * (n - w))
    return rows


def test_distance_equals_the_authors_matrix_on_random_graphs():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        words = []
        for w in range(1, n + 1):
            heads = sorted(rng.sample(range(w), rng.randint(0, min(2, w))))
            deps = sorted(rng.sample(range(1, w), rng.randint(0, min(2, w - 1)))) if w > 1 else []
            words.append((heads, deps))
        assert sentence_tape(words)[:, :, 2].tolist() == _authors_distances(words), words


def test_block_graph_and_dataset_take_the_rule():
    default, cheaper = block_graph([TWO_WORDS]), block_graph([TWO_WORDS], "cheaper")
    assert default["gilt_pairs"][2, 1].tolist() == [12, 2, 10] and cheaper["gilt_pairs"][2, 1].tolist() == [12, 2, 1]
    assert np.array_equal(default["gilt_prev"], cheaper["gilt_prev"])  # before word 2's arcs: no two-way pair yet


# --- the arc scorer's input ----------------------------------------------------------------------------------------

def _states(b=1, t=5, d=2, layers=4):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, t, d, generator=g) for _ in range(layers + 1)]


def test_word_inputs_refuses_a_word_at_position_0():
    """A word whose first subword is input position 0 has no state before it: (word_pos - 1).clamp(min=0) read
    position 0, which has seen the word itself. Now an error; index 0 and padding (sent -1) stay allowed."""
    inner = _states()
    sent = torch.tensor([[-1, 0, 0]])
    with pytest.raises(ValueError, match="input position 0"):
        word_inputs(inner, inner[0], torch.tensor([[0, 0, 2]]), sent)
    o = word_inputs(inner, inner[0], torch.tensor([[0, 1, 3]]), sent)
    assert not o[0, 0].any()
    torch.testing.assert_close(o[0, 2], torch.cat([inner[3][0, 2], inner[3][0, 2], inner[0][0, 3]]), rtol=0, atol=0)


def test_word_inputs_order():
    """[h^(L/2+1); h^(L-1); emb] (gilt_txl: the authors' cat([hiddens[L//2+1], hiddens[L-1]])) or, lower_first,
    [h^(L-1); h^(L/2+1); emb] (GiLT-GPT2: cat([hidden_states[-2], hidden_states[13]]))."""
    inner = _states(layers=6)  # L = 6: layers 4 and 5
    pos, sent = torch.tensor([[0, 2]]), torch.tensor([[-1, 0]])
    o = word_inputs(inner, inner[0], pos, sent)[0, 1]
    assert torch.equal(o, torch.cat([inner[4][0, 1], inner[5][0, 1], inner[0][0, 2]]))
    o = word_inputs(inner, inner[0], pos, sent, lower_first=True)[0, 1]
    assert torch.equal(o, torch.cat([inner[5][0, 1], inner[4][0, 1], inner[0][0, 2]]))

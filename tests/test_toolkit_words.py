"""Issue 50, item 3: word probabilities with the beginning-of-word correction (Pimentel & Meister 2024; Oh & Schuler
2024): ``p(w | C) = p(pieces | C) B(C + pieces) / B(C)``, ``B(C)`` the probability that the next token opens a word
or is ``</s>`` (docs/python.md).

On a toy model with a tiny vocabulary (3 word-initial pieces, 2 continuation pieces and the 4 specials), at a fixed
prefix, every word up to a length bound is enumerated: the corrected probabilities and ``</s>``'s sum to at most 1,
and to exactly 1 less the mass still inside longer words (which shrinks as the bound grows), while the plain sums of
pieces exceed 1 (the known bias). Over a whole sentence the corrected word probabilities and the end
multiply to the sentence's probability over the first boundary term; the boundary terms equal an independent full
softmax's."""
import math

import pytest
import torch

from conftest import small_dictionary, tiny_transformer_lm, txl
from sipe_fairseq import hub
from sipe_fairseq.data.words import word_start_mask
from sipe_fairseq.hub.distributions import bow_word_logprobs, run_engine
from sipe_fairseq.structure.family import policy_for
from sipe_fairseq.structure.options import StructureOptions
from sipe_fairseq.structure.sentences import Sentence

LN2 = math.log(2)


@pytest.fixture(scope="module")
def toy():
    torch.manual_seed(7)
    dictionary = small_dictionary(3, mark="\u2581", n_continuations=2)
    model = tiny_transformer_lm(dictionary).eval()
    with torch.no_grad():  # a sharper distribution than the initialisation's near-uniform one
        model.decoder.output_projection.weight.mul_(3.0)
    boundary = word_start_mask(dictionary, specials=False)
    boundary[dictionary.eos()] = True
    return model, dictionary, boundary


def scored(model, dictionary, boundary, source, sequences, starts):
    """run_engine on token sequences (``</s>`` appended), each with word starts ``starts``."""
    sentences = [Sentence(torch.tensor(list(seq) + [dictionary.eos()]), list(starts)) for seq in sequences]
    return run_engine(model, sentences, source, StructureOptions(batch_sentences=64), dictionary.eos(),
                      dictionary.pad(), boundary)


@pytest.mark.parametrize("source", ["untagged", "self", "mix:2"])
def test_corrected_words_at_a_prefix_sum_to_at_most_one(toy, source):
    model, dictionary, boundary = toy
    if source != "untagged" and not policy_for(model, StructureOptions(), needs_heads=False).has_heads:
        pytest.skip("the toy model has no tag heads: it cannot choose its tags")
    eos = dictionary.eos()
    initial = [i for i in range(len(dictionary)) if boundary[i] and i != eos]
    inside = [i for i in range(len(dictionary)) if not boundary[i]]  # every symbol that continues a word
    assert len(initial) == 3 and len(inside) == 5
    prefix = [dictionary.index("\u2581w0"), dictionary.index("x0")]  # one word
    [end_score], [end_obs] = scored(model, dictionary, boundary, source, [prefix], [0])
    _, end_lp, _ = bow_word_logprobs(end_score.token_logprobs, [0], end_obs.log_boundary)
    log_b_prefix = end_obs.log_boundary[len(prefix)]  # B(prefix): at the target after its last piece
    assert end_lp == pytest.approx(end_score.token_logprobs[-1] - log_b_prefix, abs=1e-12)
    corrected_total, plain_total = math.exp(end_lp), 0.0
    level = [[a] for a in initial]
    sums, inside_mass = [], []
    for _ in range(5):
        scores, observed = scored(model, dictionary, boundary, source, [prefix + w for w in level], [0, len(prefix)])
        remaining = 0.0
        for w, s, obs in zip(level, scores, observed):
            words, _, logb = bow_word_logprobs(s.token_logprobs, [0, len(prefix)], obs.log_boundary)
            assert logb[1] == pytest.approx(log_b_prefix, abs=1e-5)  # B(prefix): the same in every sentence
            corrected_total += math.exp(words[1])
            pieces = math.fsum(s.token_logprobs[len(prefix): len(prefix) + len(w)])
            plain_total += math.exp(pieces)
            remaining += math.exp(pieces) * (1 - math.exp(logb[2])) / math.exp(log_b_prefix)  # inside longer words
        sums.append(corrected_total)
        inside_mass.append(remaining)
        assert corrected_total <= 1 + 1e-6
        assert corrected_total + remaining == pytest.approx(1.0, abs=1e-5)  # the enumeration's exact deficit
        level = [w + [c] for w in level for c in inside]
    # approaching 1 as the bound grows: every longer bound adds words and leaves less mass inside longer ones
    assert all(a < b for a, b in zip(sums, sums[1:])) and all(a > b for a, b in zip(inside_mass, inside_mass[1:]))
    assert inside_mass[-1] < 0.75 * inside_mass[0]
    assert plain_total > 1  # the plain sums of pieces: a word's holds every longer word it starts (the known bias)


@pytest.fixture(scope="module")
def models(train_checkpoint):
    pos, none = train_checkpoint.many([txl("position"), txl("none")])
    return {"pos": hub.load(pos), "none": hub.load(none)}


@pytest.mark.parametrize("name,tags", [("none", "untagged"), ("pos", "self"), ("pos", "mix:4"), ("pos", "given")])
def test_word_probabilities_multiply_to_the_sentence(models, name, tags):
    """``sum(word_surprisal) + end_surprisal + boundary_surprisal[0] == sum(token_surprisal)``; the boundary terms
    are ``-log2 B`` at the targets that open a word and at ``</s>``; for the plain model against an independent
    full softmax of one forward; each word's corrected surprisal is its plain sum plus the two boundary terms."""
    lm = models[name]
    for r in lm.score(["the dog sleeps .", "some owls near the cat sing ."], tags=tags):
        assert math.fsum(r.word_surprisal) + r.end_surprisal + r.boundary_surprisal[0] == pytest.approx(
            math.fsum(r.token_surprisal), rel=1e-9)
        assert len(r.boundary_surprisal) == len(r.words) + 1
        for i, (word, plain) in enumerate(zip(r.word_surprisal, r.word_surprisal_sum)):
            assert word == pytest.approx(plain + r.boundary_surprisal[i + 1] - r.boundary_surprisal[i], abs=1e-9)
        assert r.end_surprisal == pytest.approx(r.token_surprisal[-1] - r.boundary_surprisal[-1], abs=1e-9)
        if name == "none":
            tokens, _, _, firsts = lm.encoder.encode(r.words)
            src = torch.cat([torch.tensor([lm.dictionary.eos()]), tokens[:-1]])[None]
            with torch.no_grad():
                lp = torch.log_softmax(lm.model(src)[0].double(), -1)[0]
            targets = list(firsts) + [len(tokens) - 1]
            expected = [-float(torch.logsumexp(lp[t][lm.boundary], 0)) / LN2 for t in targets]
            assert r.boundary_surprisal == pytest.approx(expected, abs=1e-5)


def test_a_bound_is_not_corrected(models):
    """``beam:K``'s per-token numbers are increments of a bound, not a distribution: its word surprisals are the
    plain sums, and it has no boundary terms."""
    [r] = models["pos"].score(["the dog sleeps ."], tags="beam:2")
    assert r.kind == "bound" and r.word_surprisal == r.word_surprisal_sum and r.boundary_surprisal is None

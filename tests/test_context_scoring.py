"""Issue 50, item 1: scoring in context (``structure.sentences.with_context``). A text after context sentences is
fed as one input, ``</s>`` between the sentences as in a training block of ``--sample-break-mode complete``, and
only the text's tokens are counted, with the structure chosen from the whole prefix (``self``, ``mix:K``).

* the chain rule: log p(context + text) = log p(context) + log p(text | context), each from its own run, under
  ``self`` and ``mix:K``, SiPE and GiLT (float64 sums, 1e-9);
* the structure restarts at every inner ``</s>`` as training gave each sentence its own: the engine's numbers
  on a whole block equal one full forward of it with the chosen structure, read with the training data's own
  rules (SiPE: ``lm_dataset.tag_targets``' anchors, the ``</s>`` before a sentence predicts its first word's
  tags; GiLT: ``gilt_dataset.block_graph``, one graph per sentence);
* a model without structure: log p(text | context) = the text's targets of one full forward;
* the positions rule: the most recent whole context sentences that fit, the others counted in ``extra``;
  an empty context is no context; ``given`` and ``beam:K`` refuse a context.
"""
import math
import random

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from conftest import small_dictionary
from sipe_fairseq.data.gilt.gilt_dataset import block_graph, position_words
from sipe_fairseq.data.lm_dataset import tag_targets
from sipe_fairseq.data.tag_timing import fixed_target_positions
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
from sipe_fairseq.hexatag.constrained import CLOSED, START, advance
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import Sentence, with_context

TOL = 1e-9  # float64 accumulations of the same per-token numbers
FWD = 1e-6  # one full forward against the cached search (float32 attention softmax inside float64 models)
EOS = 2


class _Model(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder


pytestmark = pytest.mark.usefixtures("share_every_prefix")  # conftest.py


def sipe_model(injection="position"):
    from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, sipe_proj_init_std=0.5,
                            sipe_tag_heads="on" if injection != "none" else "off", tokens_per_sample=128,
                            max_target_positions=128)
    torch.manual_seed(0)
    model = SiPETransformerXLModel(SiPEDecoder(cfg, small_dictionary(40))).double().eval()
    if injection != "none":
        with torch.no_grad():  # sharper heads, so that choices depend on the context
            model.decoder.terminal_head.weight.mul_(8)
            model.decoder.nonterminal_head.weight.mul_(8)
    return model


def gilt_model():
    from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
    cfg = GiltConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=3, decoder_attention_heads=2,
                     dropout=0.0, tokens_per_sample=128, max_target_positions=128, gilt_proj_init_std=0.3)
    torch.manual_seed(0)
    return _Model(GiltDecoder(cfg, small_dictionary(40)).double().eval())


@pytest.fixture(scope="module")
def models():
    return {"sipe": sipe_model(), "gilt": gilt_model()}


def random_sentence(rng, words=(2, 5)):
    """x_1 .. x_n </s> with 1-2 pieces per word (ids 4..43, never </s>)."""
    pieces = [rng.randint(1, 2) for _ in range(rng.randint(*words))]
    tokens = [rng.randint(4, 43) for _ in range(sum(pieces))] + [EOS]
    starts = [sum(pieces[:k]) for k in range(len(pieces))]
    return Sentence(torch.tensor(tokens), starts)


def run(model, sentences, source, **options):
    return score_sentences(model, sentences, source, StructureOptions(**options), EOS, 1, 1)


@pytest.mark.parametrize("family", ["sipe", "gilt"])
@pytest.mark.parametrize("source", ["self", "mix:4"])
def test_chain_rule(models, family, source):
    """log p(c_1 .. c_m + t) = log p(c_1 .. c_m) + log p(t | c_1 .. c_m), three separate runs; the context's
    own log-probability in ``extra`` is the context's run's."""
    model, rng = models[family], random.Random(7)
    changed = 0
    for m in (1, 1, 2, 3):
        context, text = [random_sentence(rng) for _ in range(m)], random_sentence(rng)
        conditional = run(model, [with_context(text, context)], source)[0]
        whole = run(model, [with_context(text, context, count_context=True)], source)[0]
        alone = (run(model, [context[0]], source)[0] if m == 1
                 else run(model, [with_context(context[-1], context[:-1], count_context=True)], source)[0])
        assert abs(whole.logprob - (alone.logprob + conditional.logprob)) < TOL
        assert abs(conditional.extra["context_logprob"] - alone.logprob) < TOL
        assert conditional.extra["context_sentences"] == m and conditional.extra["context_dropped"] == 0
        # the counted part is the text's: its tokens, words and position types
        plain = run(model, [text], source)[0]
        assert conditional.n_tokens == text.n and conditional.position_types == plain.position_types
        assert len(conditional.tag_logprobs) == len(text.starts)
        assert whole.n_tokens == sum(c.n for c in context) + text.n
        assert whole.position_types.count("eos") == m + 1
        changed += abs(conditional.logprob - plain.logprob) > 1e-6
    assert changed  # the context is read


def _sipe_block(model, whole, fed, timing="paper", placement="first_subword"):
    """One full forward of a block (``whole``: the sentences' tokens) with the pair ``fed[w]`` on each word (None:
    nothing), read as training reads it (``tag_targets``: the anchors, the inner ``</s>`` a sentence start;
    ``fixed_target_positions``: ``nt-delay``'s start markers): the LM log-prob per target and the tag log-prob
    per word."""
    t = whole.tokens
    terms, nts = torch.full_like(t, NOTAG_ID), torch.full_like(t, NOTAG_ID)
    for q, pair in zip(whole.starts, fed):
        if pair is not None:
            terms[q], nts[q] = FIRST_TAG_ID + TERMINALS.index(pair[0]), FIRST_TAG_ID + NONTERMINALS.index(pair[1])
    src = torch.cat([t.new_tensor([EOS]), t[:-1]])
    sa = torch.cat([t.new_tensor([NOTAG_ID]), terms[:-1]])
    sb = torch.cat([t.new_tensor([NOTAG_ID]), nts[:-1]])
    with torch.no_grad():
        logits, extra = model(src[None], src_terminals=sa[None], src_nonterminals=sb[None])
    lm = torch.log_softmax(logits[0].double(), -1).gather(-1, t[:, None]).squeeze(-1)
    per_word = torch.zeros(len(whole.starts), dtype=torch.float64)
    fixed = fixed_target_positions(src, (EOS,), timing)
    for kind, future in zip(("terminal", "nonterminal"), (terms, nts)):
        lp = torch.log_softmax(extra[f"{kind}_logits"][0].double(), -1)
        cls = tag_targets(src, sa, future, (EOS,), NOTAG_ID, placement) - FIRST_TAG_ID
        if kind == "nonterminal":
            cls[fixed] = NOTAG_ID - FIRST_TAG_ID
        for w, q in enumerate(whole.starts):  # the anchor: the last input <= q that carries tags or is a </s>
            if fed[w] is None:
                continue
            p = q if placement == "last_subword" else max(
                p for p in range(q + 1) if int(sa[p]) >= FIRST_TAG_ID or int(src[p]) == EOS)
            if int(cls[p]) >= 0:  # training's target there is word w's tag (not a fixed marker)
                assert int(cls[p]) == int(future[q]) - FIRST_TAG_ID
                per_word[w] += lp[p, cls[p]]
    return lm, per_word


def test_sipe_structure_restarts_as_in_training(models):
    """``self`` on a whole block (the context counted): every LM log-prob and every tag cost equals one full
    forward with the chosen tags read by the training data's rules; each sentence's tags are a valid prefix from
    the empty state (the automaton restarts at ``</s>``), and the text's structure after its context is the
    tail of the block's."""
    model, rng = models["sipe"], random.Random(11)
    for m in (1, 2):
        context, text = [random_sentence(rng, (3, 6)) for _ in range(m)], random_sentence(rng, (3, 6))
        whole = with_context(text, context, count_context=True)
        got = run(model, [whole], "self")[0]
        lm, cost = _sipe_block(model, whole, [tuple(p) for p in got.tags])
        assert max(abs(a - b) for a, b in zip(got.token_logprobs, lm.tolist())) < FWD
        assert max(abs(a - b) for a, b in zip(got.tag_logprobs, cost.tolist())) < FWD
        first = 0
        for s in context + [text]:
            state = START
            for pair in got.tags[first: first + len(s.starts)]:
                state = advance(START if state == CLOSED else state, pair)  # self restarts after a closed tree
                assert state is not None
            first += len(s.starts)
        conditional = run(model, [with_context(text, context)], "self")[0]
        assert conditional.tags == got.tags[-len(text.starts):]
        assert max(abs(a - b) for a, b in zip(conditional.token_logprobs, got.token_logprobs[-text.n:])) < TOL


def _gilt_block(model, whole, arcs_per_sentence):
    """One full forward of a block with one graph per sentence (``block_graph``, as training builds it): the LM
    log-prob per target and the count log-probabilities (W, 30) per word."""
    dec = model.decoder
    t = whole.tokens
    src = torch.cat([t.new_tensor([EOS]), t[:-1]])
    marks = torch.full_like(t, NOTAG_ID)
    marks[torch.tensor(whole.starts)] = FIRST_TAG_ID
    sa = torch.cat([t.new_tensor([NOTAG_ID]), marks[:-1]])
    sw, first = position_words(src, sa, EOS, dec.dictionary.bos())
    g = {k: torch.from_numpy(v)[None] for k, v in block_graph(arcs_per_sentence).items()}
    with torch.no_grad():
        logits, extra = dec(src[None], src_words=sw[None], gilt_pairs=g["gilt_pairs"], gilt_prev=g["gilt_prev"],
                            gilt_word_pos=torch.cat([first.new_zeros(1), first])[None], gilt_local=g["gilt_local"],
                            gilt_sent=g["gilt_sent"])
    lm = F.log_softmax(logits[0].double(), -1).gather(-1, t[:, None]).squeeze(-1)
    return lm, F.log_softmax(extra["arcs"]["count_logits"][0, 1:].double(), -1)


def test_gilt_structure_restarts_as_in_training(models):
    """GiLT ``self`` on a whole block: every LM log-prob and every count's log-probability equals one full forward
    with one graph per sentence (its own root; no features across sentences), as ``gilt_lm`` trains."""
    from sipe_fairseq.data.gilt.arcs import per_word
    model, rng = models["gilt"], random.Random(5)
    for m in (1, 2):
        context, text = [random_sentence(rng, (3, 6)) for _ in range(m)], random_sentence(rng, (3, 6))
        whole = with_context(text, context, count_context=True)
        got = run(model, [whole], "self")[0]
        # the block's arcs (pairs over the whole input's words, numbered in each sentence) -> per sentence
        per_sentence, first, arcs = [], 0, list(got.extra["arcs"])
        counts = got.extra["counts"]
        for s in context + [text]:
            n = len(s.starts)
            take = sum(counts[first: first + n])
            per_sentence.append(per_word(arcs[:take], n))
            arcs, first = arcs[take:], first + n
        lm, count_lp = _gilt_block(model, whole, per_sentence)
        assert max(abs(a - b) for a, b in zip(got.token_logprobs, lm.tolist())) < FWD
        want = [float(count_lp[w, c]) for w, c in enumerate(counts)]
        assert max(abs(a - b) for a, b in zip(got.extra["count_logprobs"], want)) < FWD
        conditional = run(model, [with_context(text, context)], "self")[0]
        assert conditional.extra["counts"] == counts[-len(text.starts):]


def test_plain_model_conditional_is_the_full_forward():
    """A model without structure: log p(text | context) is the text's targets of one forward of the block."""
    model, rng = sipe_model("none"), random.Random(3)
    context, text = [random_sentence(rng), random_sentence(rng)], random_sentence(rng)
    for source in ("self", "given"):
        got = run(model, [with_context(text, context)], source)[0]
        whole = with_context(text, context, count_context=True)
        src = torch.cat([whole.tokens.new_tensor([EOS]), whole.tokens[:-1]])
        with torch.no_grad():
            logits, _ = model(src[None])
        lm = torch.log_softmax(logits[0].double(), -1).gather(-1, whole.tokens[:, None]).squeeze(-1)
        assert abs(got.logprob - float(lm[-text.n:].sum())) < FWD
        assert abs(got.extra["context_logprob"] - float(lm[:-text.n].sum())) < FWD


def test_positions_rule(models):
    """The most recent whole context sentences that fit the positions are kept, the others counted in
    ``context_dropped``; the numbers are those of the kept context given explicitly; a text longer than the
    positions is refused; an empty context is no context."""
    model, rng = models["sipe"], random.Random(2)
    context = [random_sentence(rng, (3, 6)) for _ in range(4)]
    text = random_sentence(rng)
    sizes = [c.n for c in context]
    limit = text.n + sizes[-1] + sizes[-2] + 1  # the last two fit, not the third
    s = with_context(text, context, limit)
    assert s.context_dropped == 2 and s.context_sentences == 2 and s.n <= limit
    assert torch.equal(s.tokens, with_context(text, context[2:]).tokens)
    got = run(model, [s], "mix:2")[0]
    assert got.extra["context_dropped"] == 2 and got.extra["context_sentences"] == 2
    assert got.logprob == run(model, [with_context(text, context[2:])], "mix:2")[0].logprob
    # nothing fits: the text alone, the drop still counted
    alone = with_context(text, context, text.n + min(sizes) - 1)
    assert alone.context_dropped == 4 and alone.context_end == 0
    assert run(model, [alone], "self")[0].extra["context_dropped"] == 4
    with pytest.raises(ValueError, match="never cut"):
        with_context(text, context, text.n - 1)
    # an empty context is no context
    assert with_context(text, []) is text
    a, b = run(model, [with_context(text, [])], "self")[0], run(model, [text], "self")[0]
    assert a.logprob == b.logprob and "context_logprob" not in a.extra


@pytest.mark.parametrize("family,source", [("sipe", "given"), ("sipe", "beam:2"), ("gilt", "given"),
                                           ("gilt", "beam:2"), ("sipe", "untagged")])
def test_context_refused_where_not_exact(models, family, source):
    rng = random.Random(1)
    s = with_context(random_sentence(rng), [random_sentence(rng)])
    with pytest.raises(ValueError, match="context"):
        run(models[family], [s], source)


def test_batches_do_not_change_the_numbers(models):
    """Sentences with and without contexts of different lengths in one batch: each as scored alone."""
    rng = random.Random(9)
    for family in ("sipe", "gilt"):
        sents = [with_context(random_sentence(rng), [random_sentence(rng) for _ in range(k % 3)]) for k in range(5)]
        together = score_sentences(models[family], sents, "mix:3", StructureOptions(), EOS, 1, 8)
        for s, got in zip(sents, together):
            want = run(models[family], [s], "mix:3")[0]
            assert math.isclose(got.logprob, want.logprob, abs_tol=FWD)
            assert got.tags == want.tags and got.extra.get("arcs") == want.extra.get("arcs")


@pytest.mark.parametrize("family", ["sipe", "gilt"])
@pytest.mark.parametrize("source", ["self", "mix:4"])
def test_prefix_in_the_same_sentence(models, family, source):
    """``after_prefix``: a continuation counted after a prefix of the same sentence is the tail of the whole
    sentence's numbers (the structure runs on through the prefix: no ``</s>`` between them)."""
    from sipe_fairseq.structure.sentences import after_prefix
    model, rng = models[family], random.Random(13)
    for _ in range(3):
        prefix, cont = random_sentence(rng), random_sentence(rng)
        s = after_prefix(cont, prefix)
        got = run(model, [s], source)[0]
        whole = run(model, [Sentence(s.tokens, s.starts)], source)[0]
        m = prefix.n - 1
        assert got.n_tokens == cont.n and got.position_types == run(model, [cont], source)[0].position_types
        assert max(abs(a - b) for a, b in zip(got.token_logprobs, whole.token_logprobs[m:])) < TOL
        assert abs(got.logprob + got.extra["context_logprob"] - whole.logprob) < TOL
        assert got.tag_logprobs == whole.tag_logprobs[len(prefix.starts):]
    assert after_prefix(cont, None) is cont
    with pytest.raises(ValueError, match="never cut"):
        after_prefix(cont, prefix, prefix.n + cont.n - 2)


@pytest.mark.parametrize("timing,placement", [("nt-delay", "first_subword"), ("delay", "last_subword")])
def test_sipe_tag_timings_restart_per_sentence(timing, placement):
    """Under a tag timing, each sentence's word 1 follows the timing's rule (``nt-delay``: the ``EOS`` start marker,
    ``delay``: nothing), as ``TimedTagStream`` times each sentence before blocking; the engine's numbers on a
    block equal one full forward with what each word carried, read by training's rules; the chain rule holds.
    (``delay`` with ``first_subword``: the engine anchors word 2 at word 1's first subword, which carries no tags,
    where training's ``tag_targets`` anchors it at the sentence start, in a sentence alone as well: not a matter of
    the context, and not checked here.)"""
    model, rng = sipe_model(), random.Random(17)
    model.decoder.tag_timing = timing
    for m in (1, 2):
        context, text = [random_sentence(rng, (3, 6)) for _ in range(m)], random_sentence(rng, (3, 6))
        whole = with_context(text, context, count_context=True)
        got = run(model, [whole], "self", placement=placement)[0]
        fed = got.extra["fed"]
        firsts = {sum(len(s.starts) for s in (context + [text])[:k]) for k in range(m + 1)}
        for w, pair in enumerate(fed):
            if timing == "delay":
                assert (pair is None) == (w in firsts)
            elif w in firsts:
                assert pair[1] == "EOS"
        lm, cost = _sipe_block(model, whole, fed, timing, placement)
        assert max(abs(a - b) for a, b in zip(got.token_logprobs, lm.tolist())) < FWD
        assert max(abs(a - b) for a, b in zip(got.tag_logprobs, cost.tolist())) < FWD
        for source in ("self", "mix:3"):
            a = run(model, [with_context(text, context)], source, placement=placement)[0]
            b = run(model, [with_context(text, context, count_context=True)], source, placement=placement)[0]
            alone = run(model, [context[0] if m == 1 else with_context(context[1], context[:1], count_context=True)],
                        source, placement=placement)[0]
            assert abs(b.logprob - alone.logprob - a.logprob) < TOL

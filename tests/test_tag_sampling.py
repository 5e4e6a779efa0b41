"""Scheduled sampling of the fed tags (``--tag-sampling P``, ``--tag-sampling-warmup N``; criterion
``hexatag_lm``, issue 23 item 2).

Float64 tiny decoders (tests/test_prefix_tags.py, tests/test_word_aware_heads.py). What is asserted:
- p = 0 (also a warmup at update 0) is the plain criterion's loss, bit for bit;
- p = 1 with heads whose argmax is the gold unit (logits + 1e4 at the gold class) is the gold loss
  exactly, every word replaced and none changed;
- p = 1 feeds exactly the constrained argmax after the *gold* prefix, computed here word by word by
  brute force over the allowed units (``paper``: ``constrained.allowed_pairs(prefix_state(gold prefix))``;
  ``nt-delay``: ``advance_unit`` along the gold units, word 1's ``EOS`` fixed), for word-aware and plain
  heads; the heads' targets stay gold, and the loss is the plain criterion's on those tags;
- the same on a batch of a ``sipe-preprocess`` directory built by the task (``nt-delay``, blocks of
  several sentences);
- ``--tag-dropout`` after sampling: a word is fed either <notag> or the choice;
- the schedule: p at given update numbers; fairseq-train logs p rising over the warmup (the update
  number read from the trainer); bad values and ``first_subword`` are refused with one line.
"""
import math
import random
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.criterions.hexatag_lm import HexatagLMCriterion
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
from sipe_fairseq.hexatag.constrained import PAIRS, START, allowed_pairs, prefix_state
from sipe_fairseq.hexatag.errors import OptionError
from sipe_fairseq.hexatag.tags import EOS
from sipe_fairseq.hexatag.timing import advance_unit, timed_pairs
from conftest import small_dictionary, txl  # noqa: E402
from test_prefix_tags import make_model, parser_tags, word_pieces  # noqa: E402
from test_word_aware_heads import make_word_model  # noqa: E402

TAG_PAD = 1  # the tag dictionaries' <pad>: untagged targets
TOL = 1e-12  # float64, the same operations on the same inputs (relative, on the summed loss)


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


class Recorder(torch.nn.Module):
    """The model, recording the tags fed to each forward in training mode; ``gold`` (optional): a pair
    of target tensors whose classes get +1e4 on the heads' logits (the heads then choose gold)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.decoder, self.fed, self.gold = inner, inner.decoder, [], None

    def get_normalized_probs(self, *args, **kwargs):
        return self.inner.get_normalized_probs(*args, **kwargs)

    def get_targets(self, sample, net_output):
        return sample["target"]

    def forward(self, **net_input):
        if self.training:
            self.fed.append((net_input["src_terminals"].clone(), net_input["src_nonterminals"].clone()))
        logits, extra = self.inner(**net_input)
        if self.gold is not None:
            extra = dict(extra)
            for (kind, n), target in zip((("terminal", 2), ("nonterminal", 5)), self.gold):
                cls = target - FIRST_TAG_ID
                has = (cls >= 0) & (cls < n)
                onehot = F.one_hot(cls.clamp(0, n - 1), n).to(logits.dtype) * has[..., None]
                extra[f"{kind}_logits"] = extra[f"{kind}_logits"] + 1e4 * onehot
        return logits, extra


def random_sentences(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [(rng.randrange(12), rng.randrange(3)) for _ in range(rng.randint(1, 5))]
        out.append((words, parser_tags(len(words))))
    return out


def random_trees(n, seed):
    """Sentences with other gold trees than parser_tags's (random projective heads)."""
    from sipe_fairseq.hexatag import encode

    rng = random.Random(seed)

    def attach(lo, hi, parent, heads):  # words lo..hi-1 (1-based) under parent: a random head, then both sides
        if lo >= hi:
            return
        h = rng.randrange(lo, hi)
        heads[h - 1] = parent
        attach(lo, h, h, heads)
        attach(h + 1, hi, h, heads)

    out = []
    for _ in range(n):
        k = rng.randint(1, 6)
        heads = [0] * k
        attach(1, k + 1, 0, heads)
        words = [(rng.randrange(12), rng.randrange(3)) for _ in range(k)]
        out.append((words, encode(heads)))
    return out


def block_of(dictionary, sentences, timing):
    """One block as the task makes it (``last_subword``): input = </s> + the sentences' tokens but the
    last, the units of ``timing`` on the words' first subwords, tag targets = the next input's tags
    (``nt-delay``: not word 1's EOS)."""
    toks, terms, nts, first = [], [], [], []
    for words, pairs in sentences:
        units = timed_pairs(pairs, timing)
        for w, (pieces, unit) in enumerate(zip(word_pieces(dictionary, words), units)):
            for j, p in enumerate(pieces):
                toks.append(p)
                first.append(j == 0 and w == 0)
                tagged = j == 0 and unit[0] is not None
                terms.append(FIRST_TAG_ID + TERMINALS.index(unit[0]) if tagged else NOTAG_ID)
                nts.append(FIRST_TAG_ID + NONTERMINALS.index(unit[1]) if tagged else NOTAG_ID)
        toks.append(dictionary.eos())
        terms.append(NOTAG_ID)
        nts.append(NOTAG_ID)
        first.append(False)
    toks, terms, nts = torch.tensor(toks), torch.tensor(terms), torch.tensor(nts)
    shift = lambda x, v: torch.cat([x.new([v]), x[:-1]])  # noqa: E731
    t_target = torch.where(terms >= FIRST_TAG_ID, terms, TAG_PAD)
    n_target = torch.where(nts >= FIRST_TAG_ID, nts, TAG_PAD)
    if timing == "nt-delay":
        n_target[torch.tensor(first)] = TAG_PAD
    return shift(toks, dictionary.eos()), shift(terms, NOTAG_ID), shift(nts, NOTAG_ID), toks, t_target, n_target


def batch_of(dictionary, rows, timing):
    blocks = [block_of(dictionary, sentences, timing) for sentences in rows]
    width = max(len(b[0]) for b in blocks)
    pads = (dictionary.pad(), TAG_PAD, TAG_PAD, dictionary.pad(), TAG_PAD, TAG_PAD)
    cols = [torch.stack([F.pad(b[k], (0, width - len(b[k])), value=pads[k]) for b in blocks]) for k in range(6)]
    src, terms, nts, target, t_target, n_target = cols
    return {"net_input": {"src_tokens": src, "src_terminals": terms, "src_nonterminals": nts},
            "target": target, "ntokens": int((target != dictionary.pad()).sum()), "nsentences": len(rows),
            "terminal_target": t_target, "nonterminal_target": n_target}


def task_for(dictionary, timing="paper", placement="last_subword"):
    return SimpleNamespace(target_dictionary=dictionary, source_dictionary=dictionary,
                           args=SimpleNamespace(tag_head_placement=placement, tag_timing=timing))


@torch.no_grad()
def allowed_scores(model, sample, timing, eos):
    """Per word, written from the definition: ``(b, j, [(unit, score)])`` for each input (b, j) that
    carries a unit in a sentence (after an input </s>), over the units the automaton allows after the
    gold units before it, scored by the heads' log-probs at the position before it (a part without a
    target must stay gold and scores nothing), in PAIRS order."""
    net = sample["net_input"]
    was = model.training
    model.eval()
    _, extra = model(**net)
    model.train(was)
    terms, nts = net["src_terminals"], net["src_nonterminals"]
    words = []
    for b in range(terms.size(0)):
        prefix = None
        for j in range(terms.size(1)):
            if int(net["src_tokens"][b, j]) == eos:
                prefix = []
                continue
            if int(terms[b, j]) < FIRST_TAG_ID or prefix is None:
                continue
            gold = (TERMINALS[int(terms[b, j]) - FIRST_TAG_ID], NONTERMINALS[int(nts[b, j]) - FIRST_TAG_ID])
            if timing == "paper":
                allowed = allowed_pairs(prefix_state(prefix))
            else:
                state = START
                for u in prefix:
                    state = advance_unit(state, u, timing)
                allowed = [u for u in PAIRS if advance_unit(state, u, timing) is not None]
            has_t = int(sample["terminal_target"][b, j - 1]) >= FIRST_TAG_ID
            has_n = int(sample["nonterminal_target"][b, j - 1]) >= FIRST_TAG_ID
            lt = F.log_softmax(extra["terminal_logits"][b, j - 1].double(), -1)
            ln = F.log_softmax(extra["nonterminal_logits"][b, j - 1].double(), -1)
            scored = []
            for t, n in (u for u in PAIRS if u in allowed):
                if (has_t or t == gold[0]) and (has_n or n == gold[1]):
                    score_t = float(lt[TERMINALS.index(t)]) if has_t else 0.0
                    score_n = float(ln[NONTERMINALS.index(n)]) if has_n else 0.0
                    scored.append(((t, n), score_t + score_n))
            words.append((b, j, scored))
            prefix.append(gold)
    return words


def expected_feed(model, sample, timing, eos):
    """The tags p = 1 must feed: per word, the best of :func:`allowed_scores`, ties to the first in PAIRS order."""
    terms = sample["net_input"]["src_terminals"].clone()
    nts = sample["net_input"]["src_nonterminals"].clone()
    for b, j, scored in allowed_scores(model, sample, timing, eos):
        best = max(scored, key=lambda us: us[1])[0]  # max keeps the first maximum
        terms[b, j] = FIRST_TAG_ID + TERMINALS.index(best[0])
        nts[b, j] = FIRST_TAG_ID + NONTERMINALS.index(best[1])
    return terms, nts


def run(criterion, model, sample):
    model.train()
    try:
        loss, _, log = criterion(model, sample)
    finally:
        model.eval()
    return float(loss.detach()), log


def with_tags(sample, terms, nts):
    return {**sample, "net_input": {**sample["net_input"], "src_terminals": terms, "src_nonterminals": nts}}


@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_p0_is_the_plain_criterion(dictionary, timing):
    model = Recorder(make_word_model(dictionary))
    sample = batch_of(dictionary, [random_sentences(3, seed=s) for s in range(4)], timing)
    task = task_for(dictionary, timing)
    plain, _ = run(HexatagLMCriterion(task), model, sample)
    zero, log = run(HexatagLMCriterion(task, tag_sampling=0.0), model, sample)
    assert zero == plain and "ss_words" not in log
    warm = HexatagLMCriterion(task, tag_sampling=0.7, tag_sampling_warmup=10)
    warm.set_num_updates(0)
    at0, log = run(warm, model, sample)
    assert at0 == plain and "ss_words" not in log  # p(0) = 0: no extra forward, no draw


@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_p1_with_gold_choosing_heads_is_the_gold_loss(dictionary, timing):
    model = Recorder(make_word_model(dictionary))
    sample = batch_of(dictionary, [random_trees(3, seed=s) for s in range(4)], timing)
    model.gold = (sample["terminal_target"], sample["nonterminal_target"])
    task = task_for(dictionary, timing)
    gold, _ = run(HexatagLMCriterion(task), model, sample)
    model.fed.clear()
    sampled, log = run(HexatagLMCriterion(task, tag_sampling=1.0), model, sample)
    assert sampled == gold
    words = int((sample["net_input"]["src_terminals"] >= FIRST_TAG_ID).sum())
    assert log["ss_words"] == log["ss_replaced"] == words and log["ss_changed"] == log["ss_differs"] == 0
    assert torch.equal(model.fed[-1][0], sample["net_input"]["src_terminals"])
    assert torch.equal(model.fed[-1][1], sample["net_input"]["src_nonterminals"])


@pytest.mark.parametrize("heads", ["word", "state"])
@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_p1_feeds_the_constrained_argmax_after_the_gold_prefix(dictionary, timing, heads):
    inner = make_word_model(dictionary, seed=1) if heads == "word" else make_model(dictionary, seed=1)
    model = Recorder(inner)
    sample = batch_of(dictionary, [random_trees(3, seed=10 + s) for s in range(5)], timing)
    before = {k: v.clone() for k, v in sample.items() if torch.is_tensor(v)}
    terms, nts = expected_feed(model, sample, timing, dictionary.eos())
    task = task_for(dictionary, timing)
    loss, log = run(HexatagLMCriterion(task, tag_sampling=1.0), model, sample)
    fed_t, fed_n = model.fed[-1]
    assert torch.equal(fed_t, terms) and torch.equal(fed_n, nts)
    for k, v in before.items():  # targets (and the sample's own input tags) unchanged
        assert torch.equal(sample[k], v), k
    gold_t = sample["net_input"]["src_terminals"]
    words = int((gold_t >= FIRST_TAG_ID).sum())
    changed = int(((terms != gold_t) | (nts != sample["net_input"]["src_nonterminals"])).sum())
    assert log["ss_words"] == log["ss_replaced"] == words
    assert log["ss_changed"] == log["ss_differs"] == changed and 0 < changed < words  # the test is not trivial
    if timing == "nt-delay":  # word 1 keeps its EOS start marker
        starts = torch.cat([torch.zeros_like(gold_t[:, :1], dtype=torch.bool),
                            sample["net_input"]["src_tokens"][:, :-1] == dictionary.eos()], 1) & (gold_t >= FIRST_TAG_ID)
        assert bool((fed_n[starts] == FIRST_TAG_ID + NONTERMINALS.index(EOS)).all())
    want, _ = run(HexatagLMCriterion(task), model, with_tags(sample, terms, nts))
    assert loss == pytest.approx(want, rel=TOL)


@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_sample_choice_draws_from_the_allowed_distribution(dictionary, timing):
    """--tag-sampling-choice sample at p = 1: every word is fed an allowed unit, and over repeated
    updates each unit's frequency is its renormalized head probability (from :func:`allowed_scores`),
    within 5 binomial standard deviations plus 3 counts per (word, unit) (the 3 covers units of tiny
    probability, where the normal approximation fails; a fixed seed makes the draws repeatable)."""
    model = Recorder(make_word_model(dictionary, seed=3))
    sample = batch_of(dictionary, [random_trees(3, seed=50 + s) for s in range(6)], timing)
    words = allowed_scores(model, sample, timing, dictionary.eos())
    criterion = HexatagLMCriterion(task_for(dictionary, timing), tag_sampling=1.0, tag_sampling_choice="sample")
    draws = 300
    counts = [dict.fromkeys(u for u, _ in scored) for _, _, scored in words]
    for c in counts:
        for u in c:
            c[u] = 0
    torch.manual_seed(0)
    for _ in range(draws):
        run(criterion, model, sample)
        fed_t, fed_n = model.fed[-1]
        for (b, j, _), c in zip(words, counts):
            unit = (TERMINALS[int(fed_t[b, j]) - FIRST_TAG_ID], NONTERMINALS[int(fed_n[b, j]) - FIRST_TAG_ID])
            assert unit in c, (b, j, unit)  # never a unit the prefix forbids
            c[unit] += 1
    spread = 0
    for (_, _, scored), c in zip(words, counts):
        probs = torch.softmax(torch.tensor([sc for _, sc in scored], dtype=torch.float64), 0).tolist()
        for (u, _), q in zip(scored, probs):
            assert abs(c[u] - draws * q) <= 5 * math.sqrt(draws * q * (1 - q)) + 3, (u, c[u] / draws, q)
            spread += 0.01 < q < 0.99
    assert spread >= 10  # the heads are unsure on enough words for the test to mean something
    greedy = HexatagLMCriterion(task_for(dictionary, timing), tag_sampling=1.0)
    run(greedy, model, sample)  # the default is still the argmax
    terms, nts = expected_feed(model, sample, timing, dictionary.eos())
    assert torch.equal(model.fed[-1][0], terms) and torch.equal(model.fed[-1][1], nts)


def test_share_and_dropout_after_sampling(dictionary):
    model = Recorder(make_word_model(dictionary, seed=2))
    sample = batch_of(dictionary, [random_trees(4, seed=30 + s) for s in range(12)], "paper")
    terms, nts = expected_feed(model, sample, "paper", dictionary.eos())
    gold_t, gold_n = sample["net_input"]["src_terminals"], sample["net_input"]["src_nonterminals"]
    words = gold_t >= FIRST_TAG_ID
    task = task_for(dictionary)
    torch.manual_seed(0)
    _, log = run(HexatagLMCriterion(task, tag_sampling=0.5), model, sample)
    fed_t, fed_n = model.fed[-1]
    replaced = (fed_t != gold_t) | (fed_n != gold_n)
    assert torch.equal(fed_t[replaced], terms[replaced]) and torch.equal(fed_n[replaced], nts[replaced])
    assert log["ss_words"] == int(words.sum()) and log["ss_changed"] == int(replaced.sum())
    assert abs(log["ss_replaced"] / log["ss_words"] - 0.5) < 0.15  # about 150 words
    torch.manual_seed(0)
    run(HexatagLMCriterion(task, tag_sampling=1.0, tag_dropout=0.5), model, sample)
    fed_t, fed_n = model.fed[-1]
    dropped = (fed_t == NOTAG_ID) & words
    assert torch.equal(dropped, (fed_n == NOTAG_ID) & words) and 0 < int(dropped.sum()) < int(words.sum())
    kept = words & ~dropped
    assert torch.equal(fed_t[kept], terms[kept]) and torch.equal(fed_n[kept], nts[kept])


def test_task_batch_nt_delay(tmp_path):
    """A batch of a sipe-preprocess directory through the task (nt-delay, complete blocks of several
    sentences): p = 1 feeds the independent argmax, targets unchanged."""
    from conftest import toy_lm_task

    task = toy_lm_task(tmp_path, seed=5, n_valid=4, sample_break_mode="complete", tokens_per_sample=64,
                       tag_head_placement="last_subword", tag_timing="nt-delay")
    task.load_dataset("train")
    ds = task.dataset("train")
    sample = ds.collater([ds[i] for i in range(min(6, len(ds)))])
    src = sample["net_input"]["src_tokens"]
    assert int((src == task.source_dictionary.eos()).sum()) > src.size(0)  # blocks of several sentences
    inner = make_word_model(task.source_dictionary, seed=3)
    inner.decoder.tag_timing = "nt-delay"
    model = Recorder(inner)
    before = {k: v.clone() for k, v in sample.items() if torch.is_tensor(v)}
    terms, nts = expected_feed(model, sample, "nt-delay", task.source_dictionary.eos())
    loss, log = run(HexatagLMCriterion(task, tag_sampling=1.0), model, sample)
    assert torch.equal(model.fed[-1][0], terms) and torch.equal(model.fed[-1][1], nts)
    for k, v in before.items():
        assert torch.equal(sample[k], v), k
    assert log["ss_words"] == int((sample["net_input"]["src_terminals"] >= FIRST_TAG_ID).sum()) and log["ss_differs"] > 0
    want, _ = run(HexatagLMCriterion(task), model, with_tags(sample, terms, nts))
    assert loss == pytest.approx(want, rel=TOL)


def test_schedule(dictionary):
    crit = HexatagLMCriterion(task_for(dictionary), tag_sampling=0.3, tag_sampling_warmup=200)
    for n, p in ((0, 0.0), (50, 0.075), (100, 0.15), (200, 0.3), (600, 0.3)):
        crit.set_num_updates(n)
        assert crit.sampling_share() == pytest.approx(p, abs=1e-15)
    flat = HexatagLMCriterion(task_for(dictionary), tag_sampling=0.3)
    flat.set_num_updates(0)
    assert flat.sampling_share() == 0.3


@pytest.mark.parametrize("kwargs, match", [
    ({"tag_sampling": -0.1}, "--tag-sampling must be"),
    ({"tag_sampling": 1.5}, "--tag-sampling must be"),
    ({"tag_sampling": "x"}, "expected numbers"),
    ({"tag_sampling": 0.3, "tag_sampling_warmup": -1}, "--tag-sampling-warmup must be"),
    ({"tag_sampling": 0.3, "tag_sampling_warmup": 2.5}, "--tag-sampling-warmup must be"),
    ({"tag_sampling": 0.3, "tag_sampling_choice": "top"}, "--tag-sampling-choice must be one of argmax, sample"),
])
def test_bad_values_are_refused(dictionary, kwargs, match):
    with pytest.raises(OptionError, match=match) as err:
        HexatagLMCriterion(task_for(dictionary), **kwargs)
    assert "\n" not in str(err.value)


def test_first_subword_is_refused(dictionary):
    with pytest.raises(OptionError, match="last_subword") as err:
        HexatagLMCriterion(task_for(dictionary, placement="first_subword"), tag_sampling=0.3)
    assert "\n" not in str(err.value)
    HexatagLMCriterion(task_for(dictionary, placement="first_subword"), tag_sampling=0.0)  # off: any placement


def test_fairseq_train_schedules_p_from_the_trainer(train_checkpoint):
    """fairseq-train: p rises over the warmup with the update number (fairseq 0.12's trainer does not
    call the criterion's set_num_updates: the criterion reads the count the trainer logs)."""
    ck = train_checkpoint(txl("position", "--tag-head-placement", "last_subword", "--sipe-tag-head-input", "word",
                              "--tag-sampling", "0.8", "--tag-sampling-warmup", "4", "--log-interval", "1"))
    log = train_checkpoint.log(ck)
    got = {}
    for line in log.splitlines():
        n = re.search(r"num_updates[= ](\d+)", line)
        if n and "train_inner" in line:  # one line per update (--log-interval 1); none at p = 0
            p = re.search(r"tag_sampling_p[= ]([0-9.]+)", line)
            got[int(n.group(1))] = float(p.group(1)) if p else 0.0
    # update k (1-based) is trained at num_updates k - 1: p = 0.8 * min(1, (k - 1) / 4)
    assert len(got) == 6 and all(abs(p - 0.8 * min(1.0, (k - 1) / 4)) < 1e-3 for k, p in got.items()), got
    assert any(p > 0 for p in got.values())

"""Generation with model-chosen tags (``structure/generation.py`` with the hexatag policy).

Random-init tiny decoders in float64 (dropout off, large tag projections and sharpened tag heads so
that tags change the LM and choices differ by context), decoded by fairseq's generator. The
independent computation: a full forward over each finished hypothesis with the tags it reports,
whose anchors come from the training-side rule (``data/lm_dataset.tag_targets``).
"""
import math
import re
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq
from fairseq import search
from sipe_fairseq.data.lm_dataset import tag_targets
from sipe_fairseq.data.tag_dictionary import NOTAG_ID
from sipe_fairseq.hexatag import encode
from sipe_fairseq.hexatag.constrained import CLOSED, PAIRS, START, advance, allowed_pairs, is_valid
from sipe_fairseq.hexatag.tree import check_tree
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.generation import StructureChoosingLM, StructuredSequenceGenerator, wrap_for_generation
from sipe_fairseq.structure.hexatags import pair_logprobs, tag_ids
import launcher
from conftest import small_dictionary, tiny_transformer_lm  # noqa: E402

MARK = "\u2581"
ARCHS = ("relative-position", "rotary-input", "fairseq-input")


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark=MARK, n_continuations=6)


def make_model(dictionary, arch="relative-position", seed=0):
    torch.manual_seed(seed)
    position, injection = arch.split("-")
    if position == "fairseq":
        model = tiny_transformer_lm(dictionary)
        with torch.no_grad():
            model.decoder.embed_tokens.tags.terminal.normal_(std=1.0)
            model.decoder.embed_tokens.tags.nonterminal.normal_(std=1.0)
    else:
        cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                                dropout=0.0, sipe_injection=injection, position_encoding=position, sipe_proj_init_std=0.5,
                                sipe_tag_heads="on", tokens_per_sample=64, max_target_positions=64)
        model = SiPETransformerXLModel(SiPEDecoder(cfg, dictionary))
    with torch.no_grad():
        model.decoder.terminal_head.weight.mul_(8)
        model.decoder.nonterminal_head.weight.mul_(8)
    return model.double().eval()


def generate(model, dictionary, bsz=4, beam=1, sampling=False, seed=0, max_len=20, placement="first_subword",
             use_cache=True, constrained=True, prompt=None, prompt_tags=None, sample_tags=None):
    wrapped = StructureChoosingLM(model, dictionary, sample_structure=sampling if sample_tags is None else sample_tags,
                                  options=StructureOptions(placement=placement, constrained=constrained, use_cache=use_cache))
    strategy = search.Sampling(dictionary) if sampling else None
    gen = StructuredSequenceGenerator([wrapped], dictionary, beam_size=beam, max_len_b=max_len, search_strategy=strategy)
    src = prompt if prompt is not None else torch.full((bsz, 1), dictionary.eos(), dtype=torch.long)
    wrapped.decoder.set_prompt(prompt, prompt_tags)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((src.size(0),), src.size(1))}}
    torch.manual_seed(seed)
    with torch.no_grad():
        return gen.generate([wrapped], sample, prefix_tokens=prompt), wrapped


def full_forward(model, dictionary, hypo):
    """LM log-probs of the hypothesis's tokens and tag-head pair log-probs per position, with its tags."""
    toks = hypo["tokens"]
    src = torch.cat([toks.new([dictionary.eos()]), toks[:-1]])
    terms = torch.full_like(src, NOTAG_ID)
    nts = torch.full_like(src, NOTAG_ID)
    for q, pair in zip(hypo["word_starts"], hypo["tags"]):
        terms[q + 1], nts[q + 1] = tag_ids(torch.tensor(PAIRS.index(pair)))
    with torch.no_grad():
        logits, extra = model(src[None], src_terminals=terms[None], src_nonterminals=nts[None])
    lm = F.log_softmax(logits[0], -1).gather(-1, toks[:, None])[:, 0]
    heads = pair_logprobs(extra["terminal_logits"][0], extra["nonterminal_logits"][0])
    return src, terms, nts, lm, heads


def anchors(dictionary, src, terms, placement):
    """Per word, the position whose heads predict its tags: the training-side rule."""
    future = torch.cat([terms[1:], terms.new([NOTAG_ID])])
    targets = tag_targets(src, terms, future, (dictionary.eos(), dictionary.bos()), dictionary.pad(), placement)
    return targets.ne(dictionary.pad()).nonzero().flatten().tolist()


def check_hypothesis(model, dictionary, hypo, placement, max_len, prompt_len=0):
    """The tags sit on U+2581 pieces; each model-chosen pair is the argmax over the allowed pairs of
    the heads at its anchor; the hypothesis's scores are the full forward's log-probs. ``max_len``: the
    generator's max_len_b, the tokens after the prompt."""
    max_len += prompt_len
    toks = hypo["tokens"].tolist()
    starts = [q for q in range(len(toks) - 1) if q == 0 or dictionary[toks[q]].startswith(MARK)]
    assert hypo["word_starts"] == starts
    src, terms, _, lm, heads = full_forward(model, dictionary, hypo)
    where = anchors(dictionary, src, terms, placement)
    assert len(where) == len(starts)
    state = START
    for w, (q, pair, origin) in enumerate(zip(starts, hypo["tags"], hypo["tag_origin"])):
        if origin == "model":
            pos = q + 1
            allowed = [PAIRS.index(p) for p in allowed_pairs(state, max(max_len - pos, 0))]
            if pos <= prompt_len:
                allowed = [p for p in allowed if advance(state, PAIRS[p]) != CLOSED] or allowed
            best = max(allowed, key=lambda p: (float(heads[where[w], p]), -p))
            assert PAIRS[best] == pair, f"word {w}: chose {pair}, heads at {where[w]} prefer {PAIRS[best]}"
            assert math.isclose(hypo["tag_logprobs"][w], float(heads[where[w], best]), abs_tol=1e-6)
        state = advance(state, pair)
    torch.testing.assert_close(hypo["positional_scores"].double(), lm, rtol=0, atol=1e-6)


class EosBiased(torch.nn.Module):
    """A decoder whose ``</s>`` logit is raised by ``shift`` (sentences end by themselves often)."""

    structure = "hexatags"  # declared: its forward takes **kwargs

    def __init__(self, model, eos, shift):
        super().__init__()
        self.inner, self.eos, self.shift = model.decoder, eos, shift
        self.terminal_head = self.inner.terminal_head
        self.dictionary, self.embed_tokens = self.inner.dictionary, self.inner.embed_tokens

    def max_positions(self):
        return self.inner.max_positions()

    def forward(self, *args, **kwargs):
        logits, extra = self.inner(*args, **kwargs)
        logits = logits.clone()
        logits[..., self.eos] += self.shift
        return logits, extra

    def reorder_incremental_state_scripting(self, state, order):
        self.inner.reorder_incremental_state_scripting(state, order)


@pytest.mark.parametrize("placement", ["first_subword", "last_subword"])
def test_sampled_sentences_always_decode_to_a_tree(dictionary, placement):
    """200 sampled sentences (50 prompts x 4 samples), tags sampled too, from a model that likes to
    end sentences (</s> logit + 3) and dislikes the EOS tag (bias -5): every finished hypothesis's tags
    form one valid tree (EOS exactly on the last word), whether it ended by the model's own </s> or at
    the length limit; without the constraints most do not."""
    base = make_model(dictionary)
    with torch.no_grad():
        base.decoder.nonterminal_head.bias[4] -= 5.0  # EOS is the last non-terminal class
    model = EosBiased(base, dictionary.eos(), 3.0)
    hyps, _ = generate(model, dictionary, bsz=50, beam=4, sampling=True, seed=1, max_len=12, placement=placement)
    flat = [h for beam in hyps for h in beam]
    assert len(flat) == 200
    natural, words = 0, []
    for h in flat:
        assert int(h["tokens"][-1]) == dictionary.eos()
        assert is_valid(h["tags"]) and h["heads"] is not None, h["tags"]
        check_tree(h["heads"])
        assert len(h["heads"]) == len(h["word_starts"])
        natural += len(h["tokens"]) <= 12
        words.append(len(h["tags"]))
    assert 50 < natural < 200  # both ways of ending occur
    assert sum(w >= 3 for w in words) > 50  # trees of several words
    loose, _ = generate(model, dictionary, bsz=50, beam=4, sampling=True, seed=1, max_len=12, placement=placement,
                        constrained=False)
    assert sum(h["heads"] is None for beam in loose for h in beam) > 100


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_generation_equals_uncached(dictionary, arch):
    """Same seed: the KV-cached and the full-forward-per-step generators sample the same tokens and
    tags, with the same scores."""
    model = make_model(dictionary, arch)
    a, _ = generate(model, dictionary, bsz=6, beam=2, sampling=True, seed=5, max_len=14)
    b, _ = generate(model, dictionary, bsz=6, beam=2, sampling=True, seed=5, max_len=14, use_cache=False)
    for x, y in zip(a, b):
        for h, g in zip(x, y):
            assert torch.equal(h["tokens"], g["tokens"])
            assert h["tags"] == g["tags"] and h["word_starts"] == g["word_starts"]
            torch.testing.assert_close(h["positional_scores"], g["positional_scores"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("placement", ["first_subword", "last_subword"])
def test_beam_scores_equal_full_forward_with_chosen_tags(dictionary, arch, placement):
    """Beam 3 after a forced 2-token prompt: every hypothesis's per-token scores equal a full
    forward's with its own tags, and every pair is the constrained argmax of the heads at the
    anchor that training used."""
    model = make_model(dictionary, arch)
    g = torch.Generator().manual_seed(2)
    prompt = torch.stack([torch.tensor([dictionary.index(f"{MARK}w{int(i)}"), dictionary.index("x1")])
                          for i in torch.randint(0, 12, (3,), generator=g)])
    hyps, _ = generate(model, dictionary, beam=3, max_len=16, placement=placement, prompt=prompt)
    checked = 0
    for beam in hyps:
        assert len(beam) == 3
        for h in beam:
            assert h["heads"] is not None
            check_hypothesis(model, dictionary, h, placement, 16, prompt_len=2)
            checked += 1
    assert checked == 9


def test_prompt_tags_are_kept(dictionary):
    """A prompt whose words bring tags (a parse of the prompt alone: its last word closes the tree)
    keeps them, except the closing last pair, which the model replaces; the tree decodes."""
    model = make_model(dictionary)
    heads = [2, 0, 2, 3]  # w0 <- w1 (root) -> w2 -> w3
    given = encode(heads)
    assert given[-1][1] == "EOS"
    words = [dictionary.index(f"{MARK}w{i}") for i in (3, 5, 7, 9)]
    prompt = torch.tensor([[words[0], words[1], dictionary.index("x2"), words[2], words[3]]])
    per_word = [[PAIRS.index(pair) for pair in given]]  # words start at prompt tokens 0, 1, 3, 4
    hyps, wrapped = generate(model, dictionary, beam=2, max_len=14, prompt=prompt, prompt_tags=per_word)
    for h in hyps[0]:
        assert h["tags"][:3] == given[:3]
        assert h["tag_origin"][:4] == ["prompt"] * 3 + ["model"]
        assert h["tags"][3] != given[3] and h["tags"][3][1] != "EOS"
        assert all(o == "model" for o in h["tag_origin"][4:])
        assert h["heads"] is not None
        check_hypothesis(model, dictionary, h, "first_subword", 14, prompt_len=5)
    assert wrapped.decoder.given_replaced == 2  # the last prompt word, once per beam row


@pytest.mark.parametrize("placement", ["first_subword", "last_subword"])
def test_greedy_tags_are_the_self_scorers(dictionary, placement):
    """Sampled sentences with argmax tags: scoring each finished sentence with ``self`` (the structure
    engine, which sees the words but not the generator) chooses the same tags and gives the same
    per-token log-probabilities: both are the one policy, a function of the prefix."""
    from sipe_fairseq.structure.scoring import score_sentences
    from sipe_fairseq.structure.sentences import Sentence

    model = make_model(dictionary)
    hyps, _ = generate(model, dictionary, bsz=6, beam=2, sampling=True, sample_tags=False, seed=5, max_len=40,
                       placement=placement)
    checked = 0
    for beam in hyps:
        for h in beam:
            own = score_sentences(model, [Sentence(h["tokens"], h["word_starts"])], "self",
                                  StructureOptions(placement=placement), dictionary.eos(), dictionary.pad())[0]
            assert own.tags == h["tags"]
            assert max(abs(u - float(v)) for u, v in zip(own.token_logprobs, h["positional_scores"])) < 1e-6
            assert own.tag_logprobs == pytest.approx(h["tag_logprobs"], abs=1e-9)
            checked += 1
    assert checked == 12


def test_max_len_counts_generated_tokens_and_long_prompts_are_refused(dictionary):
    """The structured generator's ``max_len_b`` counts the tokens after the prompt (fairseq's counts the
    prompt too): a 6-token prompt with max_len_b 4 keeps the prompt and ends within 4 new tokens + </s>;
    a prompt that leaves no room in the model's 64 positions is refused, not cut."""
    model = make_model(dictionary)
    words = [dictionary.index(f"{MARK}w{i}") for i in (1, 2, 3, 4, 5, 6)]
    prompt = torch.tensor([words])
    hyps, _ = generate(model, dictionary, beam=2, max_len=4, prompt=prompt)
    for h in hyps[0]:
        assert h["tokens"][:6].tolist() == words and len(h["tokens"]) <= 6 + 4 + 1
    assert any(len(h["tokens"]) > 5 for h in hyps[0])
    long = torch.tensor([[words[i % 6] for i in range(63)]])
    with pytest.raises(ValueError, match="sample|prompt.*63 tokens.*no room"):
        generate(model, dictionary, beam=1, max_len=4, prompt=long)


def test_model_without_tags_generates_as_plain_lm(dictionary):
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection="none", tokens_per_sample=64, max_target_positions=64)
    plain = SiPETransformerXLModel(SiPEDecoder(cfg, dictionary)).eval()
    models, tagged = wrap_for_generation([plain], dictionary, "first_subword", False)
    assert not tagged and models[0] is plain
    models, tagged = wrap_for_generation([make_model(dictionary)], dictionary, "first_subword", False)
    assert tagged and isinstance(models[0], StructureChoosingLM)


# ------------------------------------------------------------------ end to end through fairseq's CLIs
BIN = Path(sys.executable).parent
PLUGIN = str(Path(sipe_fairseq.__file__).parent)
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    root = tmp_path_factory.mktemp("gen")
    toy_grammar.make_corpus(root / "toy", n_train=300, n_valid=40, n_test=40, seed=3)
    data = root / "data"
    assert preprocess_main(["--train", str(root / "toy/train.conllu"), "--valid", str(root / "toy/valid.conllu"),
                            "--test", str(root / "toy/test.conllu"), "--destdir", str(data), "--spm-vocab-size", "200"]) == 0
    save = root / "ck"
    run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--tokens-per-sample", "64",
         "--sample-break-mode", "eos", "--criterion", "hexatag_lm", "--arch", "sipe_txl_tiny", "--sipe-injection", "position",
         "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024", "--max-update", "8", "--seed", "1",
         "--save-dir", save, "--no-epoch-checkpoints", "--no-last-checkpoints", "--num-workers", "0"], root)
    return data, save / "checkpoint_best.pt"


def run(cmd, cwd, stdin=None, with_log=False):
    """stdout (``with_log``: then stderr, where the task logs the structure lines under fairseq's commands)."""
    proc = launcher.run(cmd, cwd=cwd, env=ENV, timeout=600, input=stdin)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr if with_log else proc.stdout


def tagged_lines(out):
    """{kind: {id: text}} of fairseq's H lines and the TAGS/TREE lines the task logs (after the log prefix)."""
    rows = {}
    for line in out.splitlines():
        found = re.match(r"(H)-(\S+)\t(.*)$", line) or re.search(r"\b(TAGS|TREE)-(\S+)\t(.*)$", line)
        if found:
            rows.setdefault(found.group(1), {})[found.group(2)] = found.group(3)
    return rows


def test_fairseq_generate_end_to_end(trained):
    """``fairseq-generate --task hexatag_lm --prefix-size 2 --sampling`` on the test split: one
    hypothesis, one tag line and one decoded tree per sentence; the prompt's words keep the data's
    tags (starred) unless they close the tree."""
    data, ck = trained
    out = run([BIN / "fairseq-generate", data, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--path", ck,
               "--gen-subset", "test", "--sample-break-mode", "eos", "--tokens-per-sample", "64", "--prefix-size", "2",
               "--sampling", "--beam", "1", "--max-len-b", "30", "--seed", "3", "--batch-size", "8", "--num-workers", "0"],
              data.parent, with_log=True)
    rows = tagged_lines(out)
    assert len(rows["H"]) == 40 and set(rows["TAGS"]) == set(rows["H"]) == set(rows["TREE"])
    for sid, tree in rows["TREE"].items():
        heads = [int(x.split("->")[1]) for x in tree.split()]
        check_tree(heads)
        assert len(heads) == len(rows["TAGS"][sid].split())
    assert any("*" in t for t in rows["TAGS"].values())


def test_fairseq_interactive_end_to_end(trained):
    """``fairseq-interactive`` continues raw prompts (sentencepiece) with beam search and prints tags and trees."""
    data, ck = trained
    out = run([BIN / "fairseq-interactive", data, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--path", ck,
               "--bpe", "sentencepiece", "--sentencepiece-model", data / "spm.model", "--beam", "2",
               "--max-len-b", "20", "--tokens-per-sample", "64"], data.parent, stdin="the dog\nthe cat saw\n", with_log=True)
    rows = tagged_lines(out)
    assert len(rows["TREE"]) == 2 and len(rows["H"]) == 2
    for tree in rows["TREE"].values():
        check_tree([int(x.split("->")[1]) for x in tree.split()])


def conllu_blocks(text):
    blocks = []
    for block in text.strip().split("\n\n"):
        meta = {k: v for k, _, v in (line[2:].partition(" = ") for line in block.splitlines() if line.startswith("# "))}
        rows = [line.split("\t") for line in block.splitlines() if not line.startswith("#")]
        blocks.append((meta, rows))
    return blocks


def test_sipe_generate_prompts_to_conllu(trained, tmp_path):
    """``sipe-generate``: one CoNLL-U block per prompt x nbest; the prompt's words start the text,
    the heads are hexatag.decode of the tags listed, every block is one tree."""
    from sipe_fairseq.hexatag import decode

    data, ck = trained
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the dog\n\nsome owls near the\n")
    out = run([sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", ck, "--data", data, prompts, "--sampling",
               "--beam", "3", "--nbest", "2", "--max-len", "25", "--seed", "2"], tmp_path)
    blocks = conllu_blocks(out)
    assert len(blocks) == 6
    for meta, rows in blocks:
        words = [r[1] for r in rows]
        given = meta["prompt"].split()  # the prompt's words stay whole: the first generated token starts a word
        assert meta["text"].split() == words and words[:len(given)] == given
        tags = [tuple(t.rstrip("*").split("/")) for t in meta["tags"].split()]
        heads = [int(r[6]) for r in rows]
        assert decode(tags) == heads and [r[9] for r in rows] == [f"Hexatag={t},{n}" for t, n in tags]
        check_tree(heads)


def test_sipe_generate_keeps_parser_tags_of_the_prompt(trained, tmp_path):
    """``--prompt-tags spacy``: the prompt's words carry the parse's tags (starred), except the last
    word, whose pair closes the parse's tree and is chosen by the model."""
    from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, make_parser, spacy_available

    reason = spacy_available(DEFAULT_SPACY_MODEL)
    if reason:
        pytest.skip(reason)
    data, ck = trained
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the old dogs near the nurses\n")
    words, heads = make_parser("spacy").parse_text(["the old dogs near the nurses"])[0]
    given = encode(heads)
    out = run([sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", ck, "--data", data, prompts, "--beam", "2",
               "--max-len", "25", "--prompt-tags", "spacy"], tmp_path)
    (meta, rows), = conllu_blocks(out)
    tags = meta["tags"].split()
    n = len(words)
    assert [r[1] for r in rows][:n] == words
    assert tags[:n - 1] == [f"{t}/{nt}*" for t, nt in given[:n - 1]]  # kept, marked as the prompt's
    assert not tags[n - 1].endswith("*")  # the parse closes its tree there: the model chose that pair


def test_sipe_generate_keeps_the_prompt_words_whole(trained, tmp_path):
    """The first generated token starts a new word: "the dog" stays "the dog" in every sample, the tag
    of the word after it sits on a new word; with --continue-word the last prompt word may go on (here it
    does in some of 24 samples)."""
    data, ck = trained
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the dog\nthe cat\n")
    common = [sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", ck, "--data", data, prompts, "--sampling",
              "--beam", "12", "--nbest", "12", "--max-len", "8", "--seed", "3"]
    whole = conllu_blocks(run(common, tmp_path))
    assert len(whole) == 24
    for meta, rows in whole:
        assert [r[1] for r in rows][:2] == meta["prompt"].split()
    going_on = conllu_blocks(run(common + ["--continue-word"], tmp_path))
    assert any([r[1] for r in rows][1] != meta["prompt"].split()[1] for meta, rows in going_on)


def test_sipe_generate_bad_checkpoint_is_one_line(tmp_path):
    (tmp_path / "dict.txt").write_text("")  # --data is checked before the checkpoint is read (a usage error, 2)
    proc = launcher.run([sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", str(tmp_path / "missing.pt"),
                         "--data", str(tmp_path), "-"], env=ENV, input="the dog\n", timeout=300)
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [f"sipe-generate: ERROR: checkpoint {tmp_path / 'missing.pt'}: no such file"]

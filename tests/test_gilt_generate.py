"""Generation with a GiLT model choosing each new word's arcs (``structure/generation.py`` with the arc policy).

In process: random-init ``gilt_txl`` decoders in float64 (dropout 0, feature projections large
enough that the graph changes the LM) decoded by fairseq's generator with the KV cache. The
independent computations: a full (teacher-forced) forward over each finished hypothesis with its
reported arcs as the gold graph (``data/gilt_dataset.block_graph``), and the greedy graph search
of the structure engine's ``self`` on the same words. End to end: ``fairseq-generate``,
``fairseq-interactive`` and ``sipe-generate`` on a tiny trained GiLT checkpoint (conftest cache).
"""
import re
import sys

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq
from fairseq import search
from sipe_fairseq.data.gilt.gilt_dataset import block_graph, position_words
from sipe_fairseq.structure.generation import StructureChoosingLM, StructuredSequenceGenerator, wrap_for_generation
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import Sentence
from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
from sipe_fairseq.modules.arc_scorer import MAX_COUNT
from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID
import launcher
from conftest import BIN, ENV, PLUGIN, run, small_dictionary  # noqa: E402

sipe_fairseq.register()
MARK = "\u2581"
NOTAG = FIRST_TAG_ID - 1


class _Model(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark=MARK, n_continuations=6)


@pytest.fixture(scope="module")
def model(dictionary):
    cfg = GiltConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4,
                     dropout=0.0, tokens_per_sample=64, max_target_positions=64, gilt_proj_init_std=0.5)
    torch.manual_seed(0)
    dec = GiltDecoder(cfg, dictionary)
    with torch.no_grad():  # counts that depend on the context, small ones likely: words get one arc, several, or none
        dec.arc_scorer.count.weight.mul_(20.0)
        dec.arc_scorer.count.bias[:4] += torch.tensor([2.0, 4.0, 3.0, 1.0])
    return _Model(dec.double().eval())


def generate(model, dictionary, bsz=4, beam=1, sampling=False, sample_counts=False, seed=0, max_len=16, prompt=None,
             prompt_arcs=None):
    wrapped = StructureChoosingLM(model, dictionary, sample_structure=sample_counts)
    strategy = search.Sampling(dictionary) if sampling else None
    gen = StructuredSequenceGenerator([wrapped], dictionary, beam_size=beam, max_len_b=max_len, search_strategy=strategy)
    src = prompt if prompt is not None else torch.full((bsz, 1), dictionary.eos(), dtype=torch.long)
    wrapped.decoder.set_prompt(prompt, prompt_arcs)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((src.size(0),), src.size(1))}}
    torch.manual_seed(seed)
    with torch.no_grad():
        return gen.generate([wrapped], sample, prefix_tokens=prompt), wrapped


def word_starts(dictionary, toks):
    """The U+2581 rule, computed here: positions (before </s>) whose piece starts a word, and the first."""
    return [q for q in range(len(toks) - 1) if q == 0 or dictionary[int(toks[q])].startswith(MARK)]


@torch.no_grad()
def full_forward(model, hypo):
    """Teacher-forced forward of a finished hypothesis with its arcs as the gold graph: per-token LM
    log-probs and the arc scorer's outputs per word."""
    dec = model.decoder
    eos = dec.dictionary.eos()
    toks = hypo["tokens"]
    src = torch.cat([toks.new([eos]), toks[:-1]])
    terms = torch.full_like(src, NOTAG)
    for q in hypo["word_starts"]:
        terms[q + 1] = FIRST_TAG_ID
    sw, first = position_words(src, terms, eos, dec.dictionary.bos())
    g = {k: torch.from_numpy(v)[None] for k, v in block_graph([hypo["arcs"]]).items()}
    logits, extra = dec(src[None], src_words=sw[None], gilt_pairs=g["gilt_pairs"], gilt_prev=g["gilt_prev"],
                        gilt_word_pos=torch.cat([first.new_zeros(1), first])[None], gilt_local=g["gilt_local"],
                        gilt_sent=g["gilt_sent"])
    lm = F.log_softmax(logits[0], -1).gather(-1, toks[:, None])[:, 0]
    return lm, extra["arcs"]


def check_hypothesis(model, dictionary, hypo, n_prompt_words=0):
    """Word starts by the U+2581 rule; per-token scores = the full forward's with the reported arcs;
    every model-chosen word has the argmax count over c <= min(2i - 1, 29) and its top-c arcs by
    the full forward's arc logits (prompt words: the given arcs)."""
    assert hypo["word_starts"] == word_starts(dictionary, hypo["tokens"])
    n = len(hypo["word_starts"])
    assert len(hypo["arcs"]) == len(hypo["arc_origin"]) == len(hypo["arc_counts"]) == n
    lm, arcs = full_forward(model, hypo)
    torch.testing.assert_close(hypo["positional_scores"].double(), lm, rtol=0, atol=1e-6)
    for i in range(1, n + 1):
        heads, deps = hypo["arcs"][i - 1]
        assert all(0 <= h < i for h in heads) and all(1 <= d < i for d in deps)
        count_lp = F.log_softmax(arcs["count_logits"][0, i], -1)
        c = len(heads) + len(deps)
        assert hypo["arc_counts"][i - 1] == c
        # cached steps vs one full forward: gilt_transformer_lm's fairseq attention takes its softmax in float32
        # even for a float64 model (relative error ~1e-7 in the states), as the per-token scores above
        assert hypo["arc_count_logprobs"][i - 1] == pytest.approx(float(count_lp[min(c, MAX_COUNT)]), abs=1e-6)
        if hypo["arc_origin"][i - 1] == "prompt":
            assert i <= n_prompt_words
            continue
        assert c == int(count_lp[: min(2 * i - 1, MAX_COUNT) + 1].argmax())
        cand = [(float(arcs["head_logits"][0, i, v]), (v, i)) for v in range(i)] + \
               [(float(arcs["dep_logits"][0, i, v]), (i, v)) for v in range(1, i)]
        best = {a for _, a in sorted(cand, key=lambda x: -x[0])[:c]}
        assert best == {(h, i) for h in heads} | {(i, d) for d in deps}


def all_arcs(hypo):
    return [(h, i) for i, (hs, _) in enumerate(hypo["arcs"], 1) for h in hs] + \
           [(i, d) for i, (_, ds) in enumerate(hypo["arcs"], 1) for d in ds]


@pytest.mark.parametrize("mode", ["beam", "sampling"])
def test_cached_generation_equals_full_forward_with_generated_arcs(model, dictionary, mode):
    """Beam 3 (beam search) or 3 samples per row (sampled words, argmax counts): every hypothesis's
    scores are those of a full forward with its arcs as the gold graph, and its arcs are the argmax
    count's top arcs of that forward's scorer; the graphs are not trivial, and they matter (the
    same tokens with no arcs score differently)."""
    hyps, _ = generate(model, dictionary, bsz=4, beam=3, sampling=mode == "sampling", seed=1)
    flat = [h for beam in hyps for h in beam]
    assert len(flat) == 12
    for h in flat:
        check_hypothesis(model, dictionary, h)
    counts = [c for h in flat for c in h["arc_counts"]]
    assert any(c == 0 for c in counts) and any(c >= 2 for c in counts)
    assert len({tuple(h["tokens"].tolist()) for h in flat}) >= 3
    longest = max(flat, key=lambda h: len(h["arcs"]))
    empty = dict(longest, arcs=[([], []) for _ in longest["arcs"]])
    lm, _ = full_forward(model, empty)
    assert not torch.allclose(longest["positional_scores"].double(), lm, atol=1e-4)


def test_arcs_equal_the_greedy_graph_search(model, dictionary):
    """The arcs of generated sentences are the ones the structure engine's greedy search (self,
    count beam 1) finds on the same words: both are determined by the prefix."""
    hyps, _ = generate(model, dictionary, bsz=6, beam=2, sampling=True, seed=3)
    checked = 0
    eos = dictionary.eos()
    for beam in hyps:
        for h in beam:
            toks = h["tokens"].tolist()
            bounds = h["word_starts"] + [len(toks) - 1]
            words = [toks[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            starts = [sum(len(x) for x in words[:k]) for k in range(len(words))]
            greedy = score_sentences(model, [Sentence(torch.tensor(toks), starts)], "self", eos=eos, pad=dictionary.pad())[0]
            assert sorted(greedy.extra["arcs"]) == sorted(all_arcs(h))
            # the greedy score is log p(x | G) + sum log pi(c) over the same graph
            want = float(h["positional_scores"].double().sum()) + sum(h["arc_count_logprobs"])
            assert greedy.joint == pytest.approx(want, abs=1e-6)
            checked += 1
    assert checked == 12


def test_sampled_counts_follow_pi(model, dictionary):
    """With sample_counts the count is drawn from pi (not always the argmax), still with top-c arcs
    and scores equal to the full forward's."""
    hyps, _ = generate(model, dictionary, bsz=8, beam=2, sampling=True, sample_counts=True, seed=4)
    flat = [h for beam in hyps for h in beam]
    not_argmax = 0
    for h in flat:
        lm, arcs = full_forward(model, h)
        torch.testing.assert_close(h["positional_scores"].double(), lm, rtol=0, atol=1e-6)
        for i, c in enumerate(h["arc_counts"], 1):
            assert c <= min(2 * i - 1, MAX_COUNT)
            not_argmax += c != int(arcs["count_logits"][0, i, : min(2 * i - 1, MAX_COUNT) + 1].argmax())
    assert not_argmax > 0


def test_prompt_keeps_given_arcs(model, dictionary):
    """A forced 4-token prompt (3 words) with given arcs keeps them (origin ``prompt``); the words
    after it get the model's; scores still equal the full forward's with the whole graph. Without
    given arcs the prompt's words get the model's."""
    w = [dictionary.index(f"{MARK}w{i}") for i in (3, 5, 7)]
    prompt = torch.tensor([[w[0], dictionary.index("x1"), w[1], w[2]]] * 2)
    given = [([], []), ([], [1]), ([0, 1], [2])]  # w1: none; w2 -> w1; root, w1 -> w3; w3 -> w2
    hyps, wrapped = generate(model, dictionary, beam=2, max_len=14, prompt=prompt, prompt_arcs=[given, None])
    for h in hyps[0]:
        assert h["arcs"][:3] == given and h["arc_origin"][:3] == ["prompt"] * 3
        assert all(o == "model" for o in h["arc_origin"][3:])
        check_hypothesis(model, dictionary, h, n_prompt_words=3)
    for h in hyps[1]:
        assert all(o == "model" for o in h["arc_origin"])
        check_hypothesis(model, dictionary, h)
    assert wrapped.decoder.given_replaced == 0


def test_dispatch_on_the_model_family(model, dictionary):
    models, wrapped = wrap_for_generation([model], dictionary, "first_subword", True)
    assert wrapped and isinstance(models[0], StructureChoosingLM) and models[0].decoder.sample_structure
    cfg = GiltConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
                     dropout=0.0, tokens_per_sample=64, max_target_positions=64, gilt_arc_scorer=False)
    with pytest.raises(ValueError, match="no arc scorer"):
        wrap_for_generation([_Model(GiltDecoder(cfg, dictionary))], dictionary, "first_subword", False)


# ------------------------------------------------------------------ end to end through the CLIs
GILT_TRAIN = ["--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm", "--arch", "gilt_txl_tiny",
              "--tokens-per-sample", "64", "--sample-break-mode", "complete"]


@pytest.fixture(scope="module")
def gilt_checkpoint(train_checkpoint):
    return train_checkpoint(GILT_TRAIN)


def parse_arcs_line(text):
    """``word/h->d,...`` per word -> [(word, [(h, d), ...], from prompt)]."""
    out = []
    for item in text.split():
        word, _, arcs = item.rpartition("/")
        star = arcs.endswith("*")
        arcs = arcs.rstrip("*")
        pairs = [] if arcs == "-" else [tuple(int(v) for v in a.split("->")) for a in arcs.split(",")]
        out.append((word, pairs, star))
    return out


def check_arcs_and_graph(arcs_text, graph_rows):
    """Every arc of word k joins k and an earlier word or the root; the GRAPH rows list each word's
    heads (DEPS), HEAD only for exactly one head."""
    words = parse_arcs_line(arcs_text)
    heads = {k: set() for k in range(1, len(words) + 1)}
    for k, (_, pairs, _) in enumerate(words, 1):
        for h, d in pairs:
            assert max(h, d) == k and min(h, d) < k and d >= 1, (k, h, d, arcs_text)
            heads[d].add(h)
    assert len(graph_rows) == len(words)
    for k, row in enumerate(graph_rows, 1):
        cols = row.split("\t")
        assert len(cols) == 10 and cols[0] == str(k) and cols[1] == words[k - 1][0]
        listed = set() if cols[8] == "_" else {int(x.split(":")[0]) for x in cols[8].split("|")}
        assert listed == heads[k]
        assert cols[6] == (str(next(iter(heads[k]))) if len(heads[k]) == 1 else "_")
        assert f"Heads={len(heads[k])}" in cols[9]
    return words


def arc_blocks(out):
    """[(id, ARCS text, GRAPH rows)] in output order (a hypothesis's GRAPH rows follow its ARCS line)."""
    blocks = []
    for line in out.splitlines():  # the task logs them: after the log prefix
        found = re.search(r"\b(ARCS|GRAPH)-(\S+)\t(.*)$", line)
        if not found:
            continue
        kind, sid, text = found.groups()
        if kind == "ARCS":
            blocks.append((sid, text, []))
        elif kind == "GRAPH":
            assert blocks and blocks[-1][0] == sid, line
            blocks[-1][2].append(text)
    return blocks


def generated(out):
    """{id: (ARCS text, GRAPH rows)} (ids ``sid`` or ``sid.j`` with a beam) and the H lines' pieces by the same ids
    (fairseq prints the nbest H lines of a sentence under its id, in order)."""
    rows = {sid: (text, graph) for sid, text, graph in arc_blocks(out)}
    by_sentence = {}
    for sid, text in re.findall(r"^H-(\S+)\t\S+\t(.*)$", out, re.M):
        by_sentence.setdefault(sid, []).append(text)
    hyps = {}
    for sid, texts in by_sentence.items():
        for j, text in enumerate(texts):
            hyps[f"{sid}.{j}" if f"{sid}.{j}" in rows else sid] = text
    return rows, hyps


@pytest.mark.parametrize("decoding", [["--sampling", "--beam", "1", "--seed", "3"], ["--beam", "2", "--nbest", "2"]])
def test_fairseq_generate_end_to_end(gilt_checkpoint, toy_data, decoding):
    """``fairseq-generate --task gilt_lm --prefix-size 1`` on the test split (40 sentences): an ARCS
    line and one GRAPH row per word for every hypothesis, arcs only to earlier words or the root."""
    out = run([BIN / "fairseq-generate", toy_data, "--user-dir", PLUGIN, "--task", "gilt_lm", "--path", gilt_checkpoint,
               "--gen-subset", "test", "--sample-break-mode", "eos", "--tokens-per-sample", "64", "--prefix-size", "1",
               "--max-len-b", "25", "--batch-size", "8", "--num-workers", "0", *decoding], toy_data.parent)
    rows, hyps = generated(out)
    n_hyp = 40 * (2 if "--nbest" in decoding else 1)
    assert len(hyps) == len(rows) == n_hyp and set(rows) == set(hyps)
    n_arcs = 0
    for sid, (text, graph) in rows.items():
        words = check_arcs_and_graph(text, graph)
        pieces = hyps[sid].split()  # the H line: the pieces
        assert len(words) == sum(q == 0 or p.startswith(MARK) for q, p in enumerate(pieces))
        n_arcs += sum(len(p) for _, p, _ in words)
    assert n_arcs > 0


def stdout_of(cmd, cwd=None, stdin=None, with_log=False):
    """Run ``cmd`` (exit status 0 asserted) and return its stdout only (``with_log``: then its stderr, where the
    task logs the ARCS/GRAPH lines under fairseq's commands, not interleaved)."""
    proc = launcher.run(cmd, cwd=cwd, input=stdin, env=ENV, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr if with_log else proc.stdout


def test_fairseq_interactive_end_to_end(gilt_checkpoint, toy_data):
    """``fairseq-interactive`` continues raw prompts (sentencepiece) with beam 2 and prints arcs and graphs."""
    out = stdout_of([BIN / "fairseq-interactive", toy_data, "--user-dir", PLUGIN, "--task", "gilt_lm", "--path",
                     gilt_checkpoint, "--bpe", "sentencepiece", "--sentencepiece-model", toy_data / "spm.model", "--beam",
                     "2", "--max-len-b", "20", "--tokens-per-sample", "64", "--sample-break-mode", "eos"],
                    stdin="the dog\nthe cat saw\n", with_log=True)
    blocks = arc_blocks(out)
    assert len(blocks) == 4 and len(re.findall(r"^H-", out, re.M)) == 2  # every beam hypothesis's arcs, the best's H
    for _, text, graph in blocks:
        check_arcs_and_graph(text, graph)


def test_fairseq_interactive_without_whole_sentences_is_one_line(gilt_checkpoint, toy_data):
    """fairseq's default --sample-break-mode none cuts sentences: one line, exit status 1, no traceback."""
    proc = launcher.run([BIN / "fairseq-interactive", toy_data, "--user-dir", PLUGIN, "--task", "gilt_lm", "--path",
                         gilt_checkpoint], input="the dog\n", env=ENV, timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "--sample-break-mode" in proc.stderr.splitlines()[-1]


def conllu_blocks(text):
    blocks = []
    for block in text.strip().split("\n\n"):
        meta = {k: v for k, _, v in (line[2:].partition(" = ") for line in block.splitlines() if line.startswith("# "))}
        rows = [line for line in block.splitlines() if not line.startswith("#")]
        blocks.append((meta, rows))
    return blocks


def test_sipe_generate_gilt_checkpoint(gilt_checkpoint, toy_data, tmp_path):
    """``sipe-generate`` with a GiLT checkpoint: one CoNLL-U block per prompt x nbest with ``# arcs``
    and graph rows; the prompt's words start the text."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the dog\n\nsome owls near the\n")
    cmd = [sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", gilt_checkpoint, "--data", toy_data, prompts,
           "--sampling", "--beam", "3", "--nbest", "2", "--max-len", "25", "--seed", "2"]
    out = stdout_of(cmd, tmp_path)
    blocks = conllu_blocks(out)
    assert len(blocks) == 6
    for meta, rows in blocks:
        words = check_arcs_and_graph(meta["arcs"], rows)
        assert meta["text"].split() == [w for w, _, _ in words]
        given = meta["prompt"].split()
        assert meta["text"].split()[:max(len(given) - 1, 0)] == given[:-1]
        assert not any(star for _, _, star in words)  # no parse: the model chose the prompt's arcs
    assert stdout_of(cmd, tmp_path) == out  # same seed, same output


def test_sipe_generate_prompt_arcs_from_a_parser(gilt_checkpoint, toy_data, tmp_path):
    """``--prompt-tags spacy`` with a GiLT checkpoint: the prompt's words keep the arcs of the parse's
    tree (starred), each arc on its later word; the words after the prompt get the model's."""
    from sipe_fairseq.data.gilt.arcs import per_word, tree_arcs
    from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, make_parser, spacy_available

    reason = spacy_available(DEFAULT_SPACY_MODEL)
    if reason:
        pytest.skip(reason)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the old dogs near the nurses\n")
    words, heads = make_parser("spacy").parse_text(["the old dogs near the nurses"])[0]
    want = per_word(tree_arcs(heads), len(heads))
    out = stdout_of([sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", gilt_checkpoint, "--data", toy_data,
                     prompts, "--beam", "2", "--max-len", "25", "--prompt-tags", "spacy"], tmp_path)
    (meta, rows), = conllu_blocks(out)
    got = check_arcs_and_graph(meta["arcs"], rows)
    n = len(words)
    for k, (hs, ds) in enumerate(want, 1):
        assert got[k - 1][2], meta["arcs"]
        assert sorted(got[k - 1][1]) == sorted([(h, k) for h in hs] + [(k, d) for d in ds])
    assert not any(star for _, _, star in got[n:])

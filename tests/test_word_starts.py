"""The one ``word_start_mask`` (data/words.py) and its rule for special symbols on both call paths (masked-LM
whole-word masking: specials start words; generation: they do not), and the one ``sinusoid``
(modules/positional.py) against the formula written out with ``math``."""
import math
from types import SimpleNamespace

import torch
from fairseq.data import Dictionary

from conftest import small_dictionary, tiny_transformer_lm
from sipe_fairseq.data.words import word_start_mask
from sipe_fairseq.modules.positional import sinusoid

MARK = "\u2581"


def pieces_dictionary():
    """<s> <pad> </s> <unk>, then a marked piece, a continuation, a padding symbol, another marked piece, <mask>."""
    d = Dictionary()
    for sym in (f"{MARK}the", "cat", "madeupword0000", f"{MARK}dog", "<mask>"):
        d.add_symbol(sym)
    return d


def test_word_start_mask_rule_for_special_symbols():
    d = pieces_dictionary()
    assert d.symbols == ["<s>", "<pad>", "</s>", "<unk>", f"{MARK}the", "cat", "madeupword0000", f"{MARK}dog", "<mask>"]
    specials = word_start_mask(d, specials=True)
    plain = word_start_mask(d, specials=False)
    assert specials.dtype == plain.dtype == torch.bool
    assert specials.tolist() == [True, True, True, True, True, False, True, True, True]
    assert plain.tolist() == [False, False, False, False, True, False, False, True, False]
    assert word_start_mask(d, specials=False, no_split=True).tolist() == [True] * len(d)
    assert word_start_mask(d, specials=True, no_split=True).tolist() == [True] * len(d)


def test_masked_lm_path_counts_specials_as_word_starts(toy_data):
    """``--mask-whole-words``: fairseq's byte mask, every special symbol, padding symbol and ``<mask>`` a word start."""
    from sipe_fairseq.tasks.hexatag_mlm import HexatagMaskedLMTask

    d = Dictionary.load(str(toy_data / "dict.txt"))
    d.add_symbol("<mask>")
    starts = HexatagMaskedLMTask.whole_word_mask(SimpleNamespace(source_dictionary=d), str(toy_data), "valid")
    assert starts.dtype == torch.uint8 and len(starts) == len(d)
    marked = [sym.startswith(MARK) for sym in d.symbols]
    assert sum(marked) > 0 and not all(marked[d.nspecial:])
    padding = [sym.startswith("madeupword") for sym in d.symbols]  # fairseq pads the vocabulary with these
    expected = [i < d.nspecial or m or p or sym == "<mask>" for i, (sym, m, p) in enumerate(zip(d.symbols, marked, padding))]
    assert starts.bool().tolist() == expected


def test_generation_path_starts_no_word_at_a_special():
    """A prompt's words by the generation rule: a special symbol (here ``<unk>``) never opens a word."""
    from sipe_fairseq.structure.generation import StructureChoosingLM

    d = small_dictionary(6, mark=MARK, n_continuations=3)
    wrapped = StructureChoosingLM(tiny_transformer_lm(d).eval(), d)
    assert wrapped.decoder.starts_word.tolist() == [sym.startswith(MARK) for sym in d.symbols]
    tokens = torch.tensor([d.index(f"{MARK}w0"), d.index("x0"), d.unk(), d.index(f"{MARK}w1"), d.index("x1"),
                           d.index(f"{MARK}w2")])
    assert wrapped.decoder.prompt_words(tokens) == [0, 3, 5]


def test_sinusoid_matches_the_formula():
    """[sin | cos] halves, angle p / 10000^(2k/dim); float32 angles up to 50 rad: error ~ 50 * 2^-24."""
    dim = 10
    positions = torch.tensor([0, 1, 2, 7, 31, 50])
    got = sinusoid(positions, dim)
    assert got.shape == (len(positions), dim) and got.dtype == torch.float32
    for i, p in enumerate(positions.tolist()):
        angles = [p / 10000 ** (2 * k / dim) for k in range(dim // 2)]
        want = [math.sin(a) for a in angles] + [math.cos(a) for a in angles]
        assert max(abs(x - y) for x, y in zip(got[i].tolist(), want)) < 1e-5
    grid = torch.tensor([[3, 0], [50, 7]])  # (...,) positions: the arc scorer's distances
    assert torch.equal(sinusoid(grid, dim), sinusoid(grid.flatten(), dim).view(2, 2, dim))

"""Issue 50, item 4: ``tokenize`` without scoring, character offsets of every token and word against the input text,
and a per-word unknown flag. The independent computations: the text itself (each offset must slice out its word or
its piece), the splitter ``parsing.split_words`` and the tokens ``score`` reads."""
import pytest

from conftest import txl
from sipe_fairseq import hub
from sipe_fairseq.parsing import split_words

MARK = "\u2581"
TEXTS = ['He said, "I can\'t  go."', "the \u0436\u0436 dog sleeps .", "well-known owls cost $5.50 ...",
         "the \ufb01ne dog ."]


@pytest.fixture(scope="module")
def lm(train_checkpoint):
    return hub.load(train_checkpoint(txl("position")))


def test_offsets_slice_out_words_and_pieces(lm):
    """Every word's offset slices it out of the text, left to right; every token's (but ``</s>``) slices out its
    piece without the U+2581 mark, inside its word's span; the words are ``split_words``' and the tokens those
    ``score`` reads; the unknown flags are the words with an ``<unk>`` token."""
    tokenized = lm.tokenize(TEXTS)
    scored = lm.score(TEXTS)
    for text, t, s in zip(TEXTS, tokenized, scored):
        assert t.text == text and t.words == split_words(text) == s.words
        assert t.tokens == s.tokens and t.tokens[-1] == "</s>" and t.token_offsets[-1] is None
        assert t.word_offsets == s.word_offsets and t.token_offsets == s.token_offsets
        ends = [b for _, b in t.word_offsets]
        assert ends == sorted(ends)
        for word, (a, b) in zip(t.words, t.word_offsets):
            assert text[a:b] == word
        for q, (piece, span) in enumerate(zip(t.pieces[:-1], t.token_offsets[:-1])):
            w = t.token_word[q]
            if span is None:  # the word's pieces do not spell it (normalized characters): all of its tokens
                assert all(t.token_offsets[r] is None for r in range(len(t.tokens) - 1) if t.token_word[r] == w)
                continue
            a, b = span
            assert text[a:b] == piece.replace(MARK, "")
            assert t.word_offsets[w][0] <= a <= b <= t.word_offsets[w][1]
        for w in range(len(t.words)):
            flags = [tok == "<unk>" for tok, tw in zip(t.tokens, t.token_word) if tw == w]
            assert t.unknown[w] == any(flags)
        assert s.unknown == t.unknown and s.unknown_words == sum(t.unknown)
    assert tokenized[1].unknown == [False, True, False, False, False]
    assert tokenized[0].words[4:7] == ["I", "ca", "n't"]


def test_a_normalized_word_keeps_its_offset_and_its_pieces_have_none(lm):
    """"\ufb01ne" (a ligature that SentencePiece's NFKC normalization spells ``fi``): the word's span is the text's,
    its pieces spell "fine", not the text, so their offsets are None (docs/python.md)."""
    [t] = lm.tokenize(["the \ufb01ne dog ."])
    w = t.words.index("\ufb01ne")
    a, b = t.word_offsets[w]
    assert t.text[a:b] == "\ufb01ne"
    pieces = [p for p, tw in zip(t.pieces, t.token_word) if tw == w]
    spans = [s for s, tw in zip(t.token_offsets, t.token_word) if tw == w]
    if "".join(pieces).replace(MARK, "") == "\ufb01ne":
        pytest.skip("this SentencePiece model does not normalize the ligature")
    assert spans == [None] * len(pieces)


def test_word_lists_are_joined_by_spaces(lm):
    """A list of words is the text of the words joined by single spaces; the offsets are into that text."""
    [t] = lm.tokenize([["the", "dog", "sleeps", "."]])
    assert t.text == "the dog sleeps ." and t.word_offsets == [(0, 3), (4, 7), (8, 14), (15, 16)]
    with pytest.raises(ValueError, match=r"sentence 2 \(''\): empty"):
        lm.tokenize(["the dog .", ""])


def test_span_surprisal_sums_the_tokens_of_a_character_span(lm):
    """A word's span gives the plain sum of its pieces (``word_surprisal_sum``; a normalized word's through the
    word's offset), the whole text every token but ``</s>``, a span inside a piece that piece;
    an empty or reversed span, or one past the text, is a ValueError naming the text's length."""
    checked = 0
    for r in lm.score(TEXTS):
        for w, (a, b) in enumerate(r.word_offsets):
            assert r.span_surprisal(a, b) == pytest.approx(r.word_surprisal_sum[w], abs=1e-9)
        assert r.span_surprisal(0, len(r.text)) == pytest.approx(sum(r.token_surprisal[:-1]), abs=1e-9)
        empty = {span[0] for span in r.token_offsets if span and span[0] == span[1]}  # lone U+2581 pieces
        inside = [q for q, span in enumerate(r.token_offsets) if span and span[1] - span[0] >= 2 and span[0] not in empty]
        for q in inside:
            a, _ = r.token_offsets[q]
            assert r.span_surprisal(a, a + 1) == pytest.approx(r.token_surprisal[q], abs=1e-12)
        checked += len(inside)
        with pytest.raises(ValueError, match=rf"span 3:3 of .*: expected 0 <= start < end <= {len(r.text)} "):
            r.span_surprisal(3, 3)
        with pytest.raises(ValueError, match="the text's length"):
            r.span_surprisal(0, len(r.text) + 1)
    assert checked >= 3

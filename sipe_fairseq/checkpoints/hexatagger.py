"""The ``hexatagger:CKPT`` parser backend: a ``sipe_tagger`` checkpoint as a dependency parser.

Registered into :mod:`sipe_fairseq.parsing` when this module is imported (by
:mod:`sipe_fairseq.checkpoints`, hence by :func:`sipe_fairseq.register` and the ``sipe-*``
commands); the parsing layer itself never imports it. Tags are decoded with the constrained
decoder (:func:`~sipe_fairseq.hexatag.constrained.constrained_decode`).
"""
from typing import List, Sequence

from ..hexatag import decode
from ..hexatag.constrained import constrained_decode
from ..parsing.base import ParseError
from ..parsing.registry import register_parser
from ..parsing.tokenize import split_words
from .load import load_tagger


def tag_batch(model, token_lists, firsts: Sequence[Sequence[int]], pad: int):
    """Constrained-decoded tag sequences for a batch of 1-D token tensors with first-subword positions."""
    import torch  # lazy (heavy): registering the backend (importing sipe_fairseq.checkpoints) stays free of torch

    with torch.no_grad():
        t = max(len(x) for x in token_lists)
        src = torch.full((len(token_lists), t), pad, dtype=torch.long)
        for k, x in enumerate(token_lists):
            src[k, :len(x)] = x
        term, nont = model(src)
        term, nont = term.float().log_softmax(-1), nont.float().log_softmax(-1)
        out = []
        for k, pos in enumerate(firsts):
            idx = torch.as_tensor(list(pos), dtype=torch.long)
            out.append(constrained_decode(term[k, idx].tolist(), nont[k, idx].tolist()))
    return out


@register_parser("hexatagger")
class HexataggerParser:
    """``hexatagger:CKPT``: a ``sipe_tagger`` checkpoint as a parser. Words are encoded with the
    checkpoint's data directory (``spm.model``, ``dict.txt``) as in training; raw text is split by
    :func:`~sipe_fairseq.parsing.tokenize.split_words` (UD/PTB style). A missing or refused
    checkpoint raises :class:`~sipe_fairseq.checkpoints.load.CheckpointError`."""

    def __init__(self, path: str, batch_size: int = 64, max_tokens: int = 510):
        if not path:
            raise ValueError("hexatagger backend needs a checkpoint: hexatagger:PATH/checkpoint_best.pt")
        from ..data.encode import SentenceEncoder  # lazy (heavy): data.encode imports torch and fairseq

        self.spec = f"hexatagger:{path}"
        self.model, self.task = load_tagger(path)
        self.encoder = SentenceEncoder(self.task.cfg.data, dictionary=self.task.source_dictionary)
        limit = self.model.max_positions()  # a pre-trained body with learned absolute positions
        self.batch_size, self.max_tokens = batch_size, min(max_tokens, limit) if limit else max_tokens

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        encoded = []
        for k, words in enumerate(sentences):
            if not words:
                raise ParseError("empty sentence (no words)", k)
            toks, _, _, firsts = self.encoder.encode(list(words))
            if len(toks) > self.max_tokens:
                raise ParseError(f"sentence too long ({len(toks)} subwords > {self.max_tokens})", k)
            encoded.append((toks, firsts))
        heads = []
        pad = self.task.source_dictionary.pad()
        for i in range(0, len(encoded), self.batch_size):
            chunk = encoded[i:i + self.batch_size]
            for tags in tag_batch(self.model, [c[0] for c in chunk], [c[1] for c in chunk], pad):
                heads.append(decode(tags))
        return heads

    def parse_text(self, sentences: Sequence[str]):
        words = []
        for k, text in enumerate(sentences):
            w = split_words(text)
            if not w:
                raise ParseError(f"empty sentence {text!r}", k)
            words.append(w)
        return list(zip(words, self.parse_words(words)))

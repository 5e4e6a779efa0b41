"""``sipe_fairseq.hub``: load a checkpoint from Python, then score, parse and generate (docs/python.md).

    from sipe_fairseq import hub
    lm = hub.load("ck/checkpoint_best.pt")            # data: the directory saved in the checkpoint
    [r] = lm.score(["the dogs near the cat sleep ."], tags="mix:16")
    r.logprob, r.kind, r.words, r.word_surprisal         # natural log; "exact"; bits per word (BOW-corrected)
    [p] = lm.predict(["the dogs near the"], k=5)          # the next tokens and words; lm.tokenize: offsets

A thin facade outside the layers (like ``sipe_fairseq/__init__.py``): the implementation is
:mod:`sipe_fairseq.hub.interface`, imported when first used, so that ``import sipe_fairseq.hub`` stays free
of torch and fairseq. Nothing here prints or touches ``sys.excepthook``; the root logger and the warnings
filters are as the user had them after the first use too (fairseq's import configures logging:
:mod:`sipe_fairseq.hub.process_state`).
"""
from .process_state import process_state_kept

_NAMES = ("LanguageModel", "ScoredText", "ParsedText", "Tokenized", "Prediction", "DataPathError", "to_dataframe",
          "surprisal_rows")
_FROM_PROMPTS = ("Continuation", "GenerationSettings", "PromptError")

__all__ = list(_NAMES + _FROM_PROMPTS)


def __getattr__(name):
    if name in _NAMES:
        with process_state_kept():
            from . import interface  # lazy (heavy): torch, fairseq

        return getattr(interface, name)
    if name in _FROM_PROMPTS:
        with process_state_kept():
            from ..structure import prompts  # lazy (heavy): torch, fairseq

        return getattr(prompts, name)
    raise AttributeError(f"module 'sipe_fairseq.hub' has no attribute {name!r}")


def load(checkpoint, data=None, device="cpu", allow_dictionary_mismatch=False, **kwargs):
    """See :func:`sipe_fairseq.hub.interface.load`."""
    with process_state_kept():
        from .interface import load as _load  # lazy (heavy): torch, fairseq

    return _load(checkpoint, data, device, allow_dictionary_mismatch=allow_dictionary_mismatch, **kwargs)

"""``sipe-preprocess`` settings (:class:`PreprocessOptions`), the one error of preprocessing
(:class:`PreprocessError`), and the checks of the settings and inputs made before anything is read
(:func:`check_options`)."""
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ...parsing import DEFAULT_BACKEND, resolve_parser
from ..arc_streams import ARC_SOURCES

INPUT_FORMATS = ("conllu", "text", "tokenized")
DOCUMENT_MODES = ("none", "blank-lines", "wikitext")


class PreprocessError(RuntimeError):
    """Preprocessing cannot go on (bad options, missing input, refusals with fail_on_refusal)."""


@dataclass
class PreprocessOptions:
    """Settings of :func:`preprocess` (the ``sipe-preprocess`` options)."""

    train: str
    destdir: str
    valid: Sequence[str] = ()
    test: Sequence[str] = ()
    spm_model: Optional[str] = None
    srcdict: Optional[str] = None  # reuse this dict.txt (and dict.deprel.txt beside it) instead of building
    spm_vocab_size: int = 8000
    spm_model_type: str = "unigram"
    no_split: bool = False
    deprel: bool = False
    strict: bool = False
    fail_on_refusal: bool = False
    keep_text: bool = False
    workers: int = 1
    thresholdsrc: int = 0
    nwordssrc: int = -1
    padding_factor: int = 8
    # text input: format, parser backend (see sipe_fairseq.parsing.line_tagger) and where to keep the CoNLL-U
    input_format: str = "conllu"
    backend: Optional[str] = None  # None: parsing.DEFAULT_BACKEND
    batch_size: int = 256
    threads: int = 1
    save_conllu: Optional[str] = None
    progress: bool = True
    # raw corpora (text input): sentences by the backend's boundaries, document breaks, headings
    segment: bool = False  # a line may hold several sentences (one tree each)
    documents: str = "none"  # none | blank-lines | wikitext: where documents break (an empty </s> sentence)
    drop_headings: bool = False  # drop WikiText heading lines (= Title =, = = Section = =, ..), counted
    arcs: str = "tree"  # GiLT arc stream {split}.arcs from the basic tree or the DEPS graph (data/arc_streams.py)


def split_inputs(train: str, valid: Sequence[str] = (), test: Sequence[str] = ()) -> List[Tuple[str, str]]:
    """``[(split, path)]`` with fairseq's names: train, valid, valid1, .., test, test1, .."""
    out = [("train", train)]
    for base, paths in (("valid", valid), ("test", test)):
        out += [(base + (str(k) if k else ""), p) for k, p in enumerate(paths)]
    return out


def raw_corpus(opts: PreprocessOptions) -> bool:
    """The raw-corpus options (``segment``, ``documents``, ``drop_headings``) are in use."""
    return opts.segment or opts.documents != "none" or opts.drop_headings


def check_options(opts: PreprocessOptions) -> List[Tuple[str, str]]:
    """Refuse inconsistent options and missing inputs before anything is read; returns the splits."""
    if opts.no_split and opts.spm_model:
        raise PreprocessError("--no-split and --spm-model exclude each other")
    if opts.spm_model_type not in ("unigram", "bpe"):
        raise PreprocessError(f"--spm-model-type must be unigram or bpe, got {opts.spm_model_type!r}")
    if opts.input_format not in INPUT_FORMATS:
        raise PreprocessError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, got {opts.input_format!r}")
    text_input = opts.input_format != "conllu"
    if not text_input and (opts.backend or opts.save_conllu):
        raise PreprocessError("a backend and --save-conllu need --input-format text or tokenized")
    if opts.arcs not in ARC_SOURCES:
        raise PreprocessError(f"--arcs must be one of {', '.join(ARC_SOURCES)}, got {opts.arcs!r}")
    if opts.documents not in DOCUMENT_MODES:
        raise PreprocessError(f"--documents must be one of {', '.join(DOCUMENT_MODES)}, got {opts.documents!r}")
    if not text_input and raw_corpus(opts):
        raise PreprocessError("--segment-sentences, --documents and --drop-headings need --input-format text or tokenized")
    if text_input:
        try:
            factory, _ = resolve_parser(opts.backend or DEFAULT_BACKEND)
        except ValueError as e:
            raise PreprocessError(str(e)) from e
        if opts.segment and not hasattr(factory, "analyze"):
            raise PreprocessError(f"--segment-sentences: backend {opts.backend!r} cannot split sentences")
    if opts.srcdict:
        if not (opts.spm_model or opts.no_split):
            raise PreprocessError("--srcdict needs the sentencepiece model its pieces come from (--spm-model, e.g. "
                                  "the spm.model beside it) or --no-split")
        fixed = [o for o, v, default in (("--thresholdsrc", opts.thresholdsrc, 0), ("--nwordssrc", opts.nwordssrc, -1))
                 if v != default]
        if fixed:
            raise PreprocessError(f"{', '.join(fixed)}: the dictionary is fixed by --srcdict")
    splits = split_inputs(opts.train, opts.valid, opts.test)
    for name, path in splits + [(n, v) for n, v in (("spm-model", opts.spm_model), ("srcdict", opts.srcdict)) if v]:
        if not os.path.isfile(path):
            raise PreprocessError(f"{name}: no such file: {path}")
    if os.path.exists(os.path.join(opts.destdir, "dict.txt")):
        raise FileExistsError(f"{os.path.join(opts.destdir, 'dict.txt')} exists; use a new --destdir")
    return splits

"""``sipe-preprocess`` settings (:class:`PreprocessOptions`), the one error of preprocessing
(:class:`PreprocessError`), and the checks of the settings and inputs made before anything is read
(:func:`check_options`)."""
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import List, Optional, Sequence, Tuple

from ...parsing import DEFAULT_BACKEND, resolve_parser
from ...parsing.line_tagger import BACKEND_BATCH_SIZE, BACKEND_THREADS
from ..gilt.arc_streams import ARC_SOURCES

INPUT_FORMATS = ("conllu", "text", "tokenized")
DOCUMENT_MODES = ("none", "blank-lines", "wikitext")
SPM_MODEL_TYPES = ("unigram", "bpe")


class PreprocessError(RuntimeError):
    """Preprocessing cannot go on (bad options, missing input, refusals with fail_on_refusal)."""


def preprocess_option(default=MISSING, help: str = "", group: Optional[str] = None, flag: Optional[str] = None,
                      metavar: Optional[str] = None, choices: Optional[Sequence[str]] = None, files: bool = False):
    """A :class:`PreprocessOptions` field and its ``sipe-preprocess`` option: ``group`` (None: declared by
    :func:`~sipe_fairseq.parsing.line_tagger.add_backend_arguments`, shared with ``sipe-tag``), ``flag``
    (default: the field's name), ``files``: a comma-separated list of files."""
    meta = dict(help=help, group=group, flag=flag, metavar=metavar, choices=choices, files=files)
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


IO, SUBWORDS, RAW, TREES, FAIRSEQ = GROUPS = ("input/output", "subwords", "raw corpora (text input)", "trees and tags",
                                              "fairseq passthrough")  # the option groups of sipe-preprocess --help


@dataclass
class PreprocessOptions:
    """Settings of :func:`preprocess`, each the declaration of its ``sipe-preprocess`` option
    (``sipe_fairseq/cli/preprocess.py`` generates them from these fields)."""

    train: str = preprocess_option(group=IO, metavar="FILE", help="training data (dictionaries come from it)")
    destdir: str = preprocess_option(group=IO, metavar="DIR", help="output data directory")
    valid: Sequence[str] = preprocess_option((), group=IO, metavar="FILE[,FILE2]", files=True,
                                             help="validation data; more files -> valid1, valid2..")
    test: Sequence[str] = preprocess_option((), group=IO, metavar="FILE[,FILE2]", files=True,
                                            help="test data; more files -> test1, test2..")
    spm_model: Optional[str] = preprocess_option(None, group=SUBWORDS, metavar="FILE",
                                                 help="use this sentencepiece model instead of training one")
    srcdict: Optional[str] = preprocess_option(None, group=SUBWORDS, metavar="FILE",
                                               help="reuse this dict.txt (e.g. of the pre-training data) instead of building one "
                                                    "from --train, as fairseq-preprocess --srcdict; needs --spm-model (its "
                                                    "sentencepiece model) or --no-split; with --deprel, dict.deprel.txt "
                                                    "beside it is reused too")
    spm_vocab_size: int = preprocess_option(8000, group=SUBWORDS, metavar="N", help="pieces of the trained model")
    spm_model_type: str = preprocess_option("unigram", group=SUBWORDS, choices=SPM_MODEL_TYPES, help="sentencepiece model type")
    no_split: bool = preprocess_option(False, group=SUBWORDS, help="no subwords: each (already tokenized) word is one token")
    deprel: bool = preprocess_option(False, group=TREES, help="also write a UD deprel stream (dict.deprel.txt)")
    strict: bool = preprocess_option(False, group=TREES, help="refuse non-projective trees instead of lifting them")
    fail_on_refusal: bool = preprocess_option(False, group=TREES, help="exit with an error if any sentence is refused")
    keep_text: bool = preprocess_option(False, group=IO, help="also write the subword text as {split}.tok")
    workers: int = preprocess_option(1, group=FAIRSEQ, metavar="N",
                                     help="processes for reading/encoding, and backend processes for text input")
    thresholdsrc: int = preprocess_option(0, group=FAIRSEQ, metavar="N", help="map tokens seen < N times to <unk>")
    nwordssrc: int = preprocess_option(-1, group=FAIRSEQ, metavar="N", help="number of tokens to keep (with specials)")
    padding_factor: int = preprocess_option(8, group=FAIRSEQ, metavar="N", help="pad dict.txt to a multiple of N")
    # text input: format, parser backend (see sipe_fairseq.parsing.line_tagger) and where to keep the CoNLL-U
    input_format: str = preprocess_option("conllu", group=IO, choices=INPUT_FORMATS,
                                          help="conllu; text: one raw sentence per line, tokenized: one sentence of "
                                               "whitespace-separated words per line, both parsed with --backend")
    backend: Optional[str] = preprocess_option(None)  # None: parsing.DEFAULT_BACKEND
    batch_size: int = preprocess_option(BACKEND_BATCH_SIZE)
    threads: int = preprocess_option(BACKEND_THREADS)
    save_conllu: Optional[str] = preprocess_option(None, group=IO, metavar="DIR",
                                                   help="text input: keep the parses as DIR/{split}.conllu (as sipe-tag -o "
                                                        "writes them; written even when --fail-on-refusal stops)")
    progress: bool = preprocess_option(True)  # --no-progress
    # raw corpora (text input): sentences by the backend's boundaries, document breaks, headings
    segment: bool = preprocess_option(False, group=RAW, flag="--segment-sentences",
                                      help="a line may hold several sentences: split it by the backend's sentence boundaries "
                                           "(one tree each)")
    documents: str = preprocess_option("none", group=RAW, choices=DOCUMENT_MODES,
                                       help="keep document boundaries as empty sentences (for --sample-break-mode "
                                            "complete_doc): documents start after blank lines, or at WikiText title lines "
                                            "'= Title ='; none: blank lines skipped")
    drop_headings: bool = preprocess_option(False, group=RAW,
                                            help="drop WikiText heading lines ('= Title =', '= = Section = =', ..), counted in "
                                                 "manifest.json")
    arcs: str = preprocess_option("tree", group=TREES, choices=ARC_SOURCES,
                                  help="GiLT arc stream {split}.arcs: the basic tree (HEAD) or the enhanced graph (DEPS column)")


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
    if opts.spm_model_type not in SPM_MODEL_TYPES:
        raise PreprocessError(f"--spm-model-type must be one of {', '.join(SPM_MODEL_TYPES)}, got {opts.spm_model_type!r}")
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
        declared = {f.name: f.default for f in fields(PreprocessOptions)}
        fixed = [f"--{name}" for name in ("thresholdsrc", "nwordssrc") if getattr(opts, name) != declared[name]]
        if fixed:
            raise PreprocessError(f"{', '.join(fixed)}: the dictionary is fixed by --srcdict")
    splits = split_inputs(opts.train, opts.valid, opts.test)
    for name, path in splits + [(n, v) for n, v in (("spm-model", opts.spm_model), ("srcdict", opts.srcdict)) if v]:
        if not os.path.isfile(path):
            raise PreprocessError(f"{name}: no such file: {path}")
    if os.path.exists(os.path.join(opts.destdir, "dict.txt")):
        raise FileExistsError(f"{os.path.join(opts.destdir, 'dict.txt')} exists; use a new --destdir")
    return splits

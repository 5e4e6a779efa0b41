"""Shared test set-up: paths, the subprocess helper, and session-scoped fixtures for the toy corpus,
its ``sipe-preprocess`` data directory and a cache of tiny trained checkpoints (each distinct
training run happens once per session, whichever test file asks first)."""
import os
import sys
from pathlib import Path

import pytest

import launcher  # tests/launcher.py: CLI runs in a fork of this process (SIPE_TEST_SUBPROCESS=1: real ones)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["SIPE_CACHE_DIR"] = "off"  # no default parse cache shared between tests (tests/test_parse_cache.py sets one)

BIN = Path(sys.executable).parent  # fairseq-train, fairseq-eval-lm, ... of this interpreter's environment
PLUGIN = str(ROOT / "sipe_fairseq")  # --user-dir
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")

# the standard toy corpus (tests that need another size or seed make their own and say why)
TOY = {"n_train": 300, "n_valid": 40, "n_test": 40, "seed": 3}
TOY_PREPROCESS = ["--spm-vocab-size", "200", "--deprel"]  # --deprel: the encoder tests' Table 12 strategies read it

# training arguments shared by the tests' tiny checkpoints; a test's own arguments come after and override
TRAIN_COMMON = ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024", "--max-update", "6", "--seed", "1",
                "--no-epoch-checkpoints", "--no-last-checkpoints", "--num-workers", "0", "--log-format", "simple"]
LM_TASK = ["--user-dir", PLUGIN, "--task", "hexatag_lm", "--criterion", "hexatag_lm", "--tokens-per-sample", "64",
           "--sample-break-mode", "complete"]
MLM_TASK = ["--user-dir", PLUGIN, "--task", "hexatag_mlm", "--criterion", "hexatag_mlm", "--tokens-per-sample", "64",
            "--sample-break-mode", "complete"]
STOCK_LM = ["--task", "language_modeling", "--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim", "32",
            "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--tokens-per-sample", "64",
            "--sample-break-mode", "complete"]  # fairseq's own decoder: reads only dict.txt and the tokens
STOCK_MLM = ["--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta_base", "--encoder-layers", "2",
             "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
             "--tokens-per-sample", "64", "--sample-break-mode", "complete"]  # fairseq's own roberta


def txl(injection, *extra):
    """Training arguments of a ``sipe_txl_tiny`` hexatag LM with ``--sipe-injection injection``."""
    return [*LM_TASK, "--arch", "sipe_txl_tiny", "--sipe-injection", injection, *extra]


def small_dictionary(n_words: int = 40, mark: str = "", n_continuations: int = 0, mask: bool = False):
    """A fairseq Dictionary for in-process model tests: ``n_words`` symbols ``{mark}w{i}`` (``mark`` U+2581
    makes them word starts), then ``n_continuations`` pieces ``x{i}``, then ``<mask>`` if asked."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"{mark}w{i}")
    for i in range(n_continuations):
        d.add_symbol(f"x{i}")
    if mask:
        d.add_symbol("<mask>")
    return d


def tiny_transformer_lm(dictionary):
    """A 2-layer ``sipe_transformer_lm`` (d 32, dropout 0) on ``dictionary``, built as fairseq builds it."""
    from argparse import Namespace
    from dataclasses import fields
    from types import SimpleNamespace

    from sipe_fairseq.models.sipe_transformer_lm import (SiPETransformerLanguageModel, SiPETransformerLMConfig,
                                                         sipe_transformer_lm_tiny)

    defaults = SiPETransformerLMConfig()
    args = Namespace(**{f.name: getattr(defaults, f.name) for f in fields(defaults)})
    args.__dict__.update(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                         decoder_input_dim=32, decoder_output_dim=32, dropout=0.0, attention_dropout=0.0,
                         activation_dropout=0.0, tokens_per_sample=64, max_target_positions=64, add_bos_token=False,
                         tpu=False, decoder_learned_pos=True)
    sipe_transformer_lm_tiny(args)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return SiPETransformerLanguageModel.build_model(args, task)


def tiny_decoder_lm(family: str):
    """A tiny decoder LM built in process, random weights (seed 0), eval mode: SiPE (``"sipe"``: TXL, position
    injection, tag heads) or GiLT (``"gilt"``); d 32 x 2 layers, 4 heads, 60 symbols, 128 positions."""
    import torch

    from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder, GiltLanguageModel
    from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel

    d = small_dictionary(60)
    common = dict(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                  dropout=0.0, tokens_per_sample=128, max_target_positions=128)
    torch.manual_seed(0)
    if family == "gilt":
        return GiltLanguageModel(GiltDecoder(GiltConfig(**common), d)).eval()
    cfg = SiPEDecoderConfig(sipe_injection="position", sipe_tag_heads="on", **common)
    return SiPETransformerXLModel(SiPEDecoder(cfg, d)).eval()


def random_words_sentence(rng, words: int):
    """A structure-engine :class:`~sipe_fairseq.structure.sentences.Sentence` of ``words`` words of one or two
    random tokens (4-59) each, ``</s>`` (2) last: the sentences of the tiny models' engine tests."""
    import torch

    from sipe_fairseq.structure.sentences import Sentence

    tokens, starts = [], []
    for _ in range(words):
        starts.append(len(tokens))
        tokens += [rng.randrange(4, 60) for _ in range(rng.choice([1, 1, 2]))]
    return Sentence(torch.tensor(tokens + [2]), starts)


@pytest.fixture
def share_every_prefix(monkeypatch):
    """Beams that branch on short sentences: the KV cache shares prefixes from the first position
    (modules/kv_cache.py; plain copies below SHARE_FROM are tested in test_incremental.py). Used by a module's
    ``pytestmark = pytest.mark.usefixtures("share_every_prefix")``."""
    from sipe_fairseq.modules import kv_cache
    monkeypatch.setattr(kv_cache, "SHARE_FROM", 0)


def shared_path(*parts) -> Path:
    """A path under ../shared, or skip the test with a reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is only in the developers' workspace and CI)")
    return path


def run(cmd, cwd=None, timeout=600) -> str:
    """Run ``cmd`` (paths allowed) with ENV; assert exit status 0 (showing the command and the tail of its
    output otherwise); return stdout + stderr."""
    cmd = [str(c) for c in cmd]
    proc = launcher.run(cmd, cwd=cwd, env=ENV, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> Path:
    """train/valid/test.conllu of the standard toy corpus (TOY)."""
    from sipe_fairseq.data import toy_grammar

    out = tmp_path_factory.mktemp("toy-corpus")
    toy_grammar.make_corpus(out, **TOY)
    return out


@pytest.fixture(scope="session")
def toy_data(toy_corpus, tmp_path_factory) -> Path:
    """The standard corpus through sipe-preprocess (train/valid/test, --spm-vocab-size 200, --deprel)."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main

    out = tmp_path_factory.mktemp("toy-data")
    assert preprocess_main(["--train", str(toy_corpus / "train.conllu"), "--valid", str(toy_corpus / "valid.conllu"),
                            "--test", str(toy_corpus / "test.conllu"), "--destdir", str(out), *TOY_PREPROCESS]) == 0
    return out


@pytest.fixture(scope="session")
def toy_data_400(tmp_path_factory) -> Path:
    """A larger toy data directory (400/60/60 sentences, seed 3, no --deprel): test_resume's run has 5 updates
    per epoch on it, and test_data_validation's checks were written against it."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    root = tmp_path_factory.mktemp("toy-400")
    toy_grammar.make_corpus(root / "toy", n_train=400, n_valid=60, n_test=60, seed=3)
    out = root / "data"
    assert preprocess_main(["--train", str(root / "toy/train.conllu"), "--valid", str(root / "toy/valid.conllu"),
                            "--test", str(root / "toy/test.conllu"), "--destdir", str(out), "--spm-vocab-size", "200"]) == 0
    return out


def _canonical(args):
    """((option, values), ...) sorted, the last occurrence of an option winning (as argparse reads them):
    the same training whatever the order its arguments were written in."""
    opts, key = {}, None
    for a in map(str, args):
        if a.startswith("--"):
            key = a
            opts[key] = ()
        else:
            assert key is not None, f"training arguments start with a value: {args}"
            opts[key] += (a,)
    return tuple(sorted(opts.items()))


class CheckpointCache:
    """Tiny checkpoints trained once per session, keyed by (data directory, training arguments).

    ``cache(args, data)`` trains ``fairseq-train data TRAIN_COMMON args`` unless the same run was
    already made and returns its checkpoint_best.pt; ``cache.many([args, ...], data)`` starts the
    missing runs in parallel; ``cache.log(path)`` is the run's stdout + stderr. ``launched`` counts
    the fairseq-train processes started."""

    def __init__(self, root: Path, default_data):
        self.root, self.default_data = root, default_data
        self.paths, self.logs, self.launched = {}, {}, 0

    def _cmd(self, args, data):
        save = self.root / f"ck-{len(self.paths)}"
        cmd = [BIN / "fairseq-train", data, *TRAIN_COMMON, *args, "--save-dir", save]
        return [str(c) for c in cmd], save / "checkpoint_best.pt"

    def many(self, runs, data=None):
        data = Path(data if data is not None else self.default_data)
        keys = [(str(data), _canonical(args)) for args in runs]
        procs = {}
        for key, args in zip(keys, runs):
            if key in self.paths or key in procs:
                continue
            cmd, path = self._cmd(args, data)
            self.paths[key] = path
            procs[key] = (cmd, launcher.popen(cmd, cwd=self.root, env=ENV))
            self.launched += 1
        for key, (cmd, proc) in procs.items():
            out, _ = proc.communicate(timeout=900)
            if proc.returncode != 0:
                del self.paths[key]
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{out[-4000:]}"
            self.logs[self.paths[key]] = out
        return [self.paths[key] for key in keys]

    def __call__(self, args, data=None) -> Path:
        return self.many([args], data)[0]

    def log(self, path) -> str:
        return self.logs[Path(path)]


@pytest.fixture(scope="session")
def train_checkpoint(tmp_path_factory, toy_data):
    """The session's CheckpointCache (default data directory: toy_data)."""
    return CheckpointCache(tmp_path_factory.mktemp("checkpoints"), toy_data)


def toy_lm_task(tmp_path, seed: int = 3, n_valid: int = 12, **options):
    """A ``hexatag_lm`` task (built in-process) on its own tiny toy-grammar ``sipe-preprocess`` directory
    (40 training sentences, ``n_valid`` valid, 60 pieces); ``options`` override the task's config."""
    from omegaconf import OmegaConf

    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar
    from sipe_fairseq.tasks.hexatag_lm import HexatagLanguageModelingTask, HexatagLMConfig

    toy_grammar.make_corpus(tmp_path / "toy", n_train=40, n_valid=n_valid, n_test=2, seed=seed)
    out = tmp_path / "data"
    assert preprocess_main(["--train", str(tmp_path / "toy/train.conllu"), "--valid", str(tmp_path / "toy/valid.conllu"),
                            "--destdir", str(out), "--spm-vocab-size", "60"]) == 0
    cfg = OmegaConf.merge(OmegaConf.structured(HexatagLMConfig),
                          {"data": str(out), "dataset_impl": None, "seed": 1, "batch_size": None, "batch_size_valid": None,
                           "data_buffer_size": 10, "tpu": False, "use_plasma_view": False, "plasma_path": "/tmp/plasma",
                           **options})
    return HexatagLanguageModelingTask.setup_task(cfg)


@pytest.fixture(autouse=True)
def interrupts_left_alone(request):
    """No test leaves SIGINT ignored in the test process: a command it starts would inherit the ignored signal
    (Python keeps SIGINT ignored when it starts with it ignored), and Ctrl-C in the Python interface would stop working."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is signal.SIG_IGN and before is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"{request.node.nodeid} left SIGINT ignored in the test process")

"""Progress bars of the evaluation commands (eval/progress.py): on stderr only, never in stdout
(where the reports go), hidden when stderr is not a terminal unless forced, and off with
``--no-progress`` in ``sipe-eval`` (blimp, syntaxgym, report, attention) and ``sipe-eval-lm``."""
import argparse

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from fairseq.data import Dictionary
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.cli.options import configure_progress
from sipe_fairseq.eval import progress as P
from sipe_fairseq.eval.scoring import score_encoded_with_progress
from sipe_fairseq.eval.scoring import token_logprobs
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS, encode
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel


@pytest.fixture
def restore_mode():
    yield
    P.set_progress("auto")


@pytest.fixture(scope="module")
def setup():
    d = Dictionary()
    for i in range(8):
        d.add_symbol(f"\u2581w{i}")
    cfg = SiPEDecoderConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1, decoder_attention_heads=2,
                            dropout=0.0, sipe_injection="position", tokens_per_sample=32, max_target_positions=32)
    torch.manual_seed(0)
    model = SiPETransformerXLModel(SiPEDecoder(cfg, d)).eval()
    encoded = []
    for n in (2, 3, 4, 3, 2):
        tags = encode([n] * (n - 1) + [0])  # every word attaches to the last one
        toks = [d.index(f"\u2581w{i}") for i in range(n)] + [d.eos()]
        terms = [FIRST_TAG_ID + TERMINALS.index(t) for t, _ in tags] + [NOTAG_ID]
        nts = [FIRST_TAG_ID + NONTERMINALS.index(nt) for _, nt in tags] + [NOTAG_ID]
        encoded.append((torch.tensor(toks), torch.tensor(terms), torch.tensor(nts)))
    return model, d, encoded


def _run(model, d, encoded):
    lps = token_logprobs(model, encoded, d.eos(), d.pad(), batch_size=2)  # 3 batches
    scores = score_encoded_with_progress(model, encoded, "given", d, batch_sentences=2)
    return lps, scores


def test_forced_bars_go_to_stderr_not_stdout(setup, capsys, restore_mode):
    model, d, encoded = setup
    P.set_progress("off")
    want_lps, want_scores = _run(model, d, encoded)
    assert capsys.readouterr().err == ""
    P.set_progress("on")
    lps, scores = _run(model, d, encoded)
    out, err = capsys.readouterr()
    assert out == ""
    assert "score:" in err and "0/3 [" in err  # token_logprobs: 3 batches of <= 2 sentences
    assert "tags given:" in err and "0/5 [" in err  # the prefix-tag scorer: 5 sentences
    # the bars change nothing
    assert all(torch.equal(a, b) for a, b in zip(lps, want_lps))
    assert [s.logprob for s in scores] == [s.logprob for s in want_scores]


def test_auto_is_silent_when_stderr_is_not_a_terminal(setup, capsys, restore_mode):
    P.set_progress("auto")  # pytest's captured stderr is no terminal
    _run(*setup)
    assert capsys.readouterr() == ("", "")


def test_modes_and_bad_mode(restore_mode):
    P.set_progress("on")
    assert P.progress(range(2)).disable is False
    configure_progress(argparse.Namespace(no_progress=True))
    assert P.progress(range(2)).disable is True
    configure_progress(argparse.Namespace(no_progress=False))
    assert P.MODES[P._mode] is None  # tqdm decides from stderr.isatty()
    with pytest.raises(ValueError, match="progress mode"):
        P.set_progress("always")


def test_commands_have_no_progress(tmp_path, restore_mode):
    from sipe_fairseq.cli import eval as sipe_eval
    from sipe_fairseq.cli import eval_lm

    sub = next(a for a in sipe_eval.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    with_option = {name for name, sp in sub.choices.items() if "--no-progress" in sp._option_string_actions}
    assert with_option == {"blimp", "syntaxgym", "report", "attention"}
    # sipe-eval-lm: the option is parsed and applied before the (here missing) checkpoint stops it
    P.set_progress("on")
    assert eval_lm.main([str(tmp_path), "--path", f"m={tmp_path / 'missing.pt'}", "--no-progress"]) == 3
    assert P.progress(range(2)).disable is True

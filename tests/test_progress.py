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
from sipe_fairseq.eval.syntaxgym.columns import engine_logprobs
from sipe_fairseq.structure.scoring import score_encoded
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
    """Per-token log-probs of SyntaxGym's engine columns (each with its bar ``tags SOURCE``), batches of 2."""
    given = engine_logprobs("given", d)(model, encoded, d.eos(), d.pad(), 2)
    own = engine_logprobs("self", d)(model, encoded, d.eos(), d.pad(), 2)
    return given, own


def test_forced_bars_go_to_stderr_not_stdout(setup, capsys, restore_mode):
    model, d, encoded = setup
    P.set_progress("off")
    want_given, want_own = _run(model, d, encoded)
    assert capsys.readouterr().err == ""
    P.set_progress("on")
    given, own = _run(model, d, encoded)
    out, err = capsys.readouterr()
    assert out == ""
    assert "tags given:" in err and "tags self:" in err  # one bar per source, counting sentences
    assert err.count("0/5 [") == 2  # each bar opens at 0 of the 5 sentences
    # the bars change nothing
    assert len(given) == len(own) == 5
    assert all(torch.equal(a, b) for a, b in zip(given, want_given))
    assert all(torch.equal(a, b) for a, b in zip(own, want_own))


def test_engine_reports_each_finished_batch(setup):
    """``score_encoded``'s progress callback gets the sentences of each finished batch: the search (self) in
    batches of at most 2 sentences, shortest first (lengths 2, 2, 3, 3, 4 words); given's full forwards in as
    few as fit ``GIVEN_POSITIONS`` padded positions (all 5 here)."""
    model, d, encoded = setup
    for source, want in (("self", [2, 2, 1]), ("given", [5])):
        counts = []
        scores = score_encoded(model, encoded, source, d, batch_sentences=2, progress=counts.append)
        assert counts == want, source
        assert [s.n_tokens for s in scores] == [len(t) for t, _, _ in encoded]  # input order


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

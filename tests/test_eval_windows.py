"""hexatag_lm evaluation scores every token (issue 14, item 3): blocks longer than the model's
positions are scored in windows with left context, the count of scored tokens is reported, and an
evaluation that scores nothing stops with one line and exit status 1."""
import math
import re

import numpy as np
import pytest
import torch
from fairseq.data import data_utils
from fairseq.sequence_scorer import SequenceScorer

from sipe_fairseq.checkpoints import load_lm as load
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.tasks.hexatag_lm import ScoredTokens
from sipe_fairseq.tasks.sipe_data import EvaluationError
import launcher
from conftest import BIN, ENV, PLUGIN, txl

LIMIT = 16  # positions given to the evaluation (the model was trained with 64)



@pytest.fixture(scope="module")
def data_dir(toy_data):
    return toy_data


@pytest.fixture(scope="module")
def trained(train_checkpoint):
    return lambda name, data_dir: (train_checkpoint(txl(name.split("-", 1)[1]), data_dir), None)  # as test_decoder_e2e's


def _independent_nll(model, data_dir, d, limit):
    """Sum of -log p and count over valid, sentence by sentence (--sample-break-mode eos), each
    sentence longer than ``limit`` in windows written here from the stream files alone: the first
    ``limit`` tokens, then ``limit // 2`` new tokens at a time after ``limit // 2`` of context."""
    toks = data_utils.load_indexed_dataset(str(data_dir / "valid"), d)
    tags = [data_utils.load_indexed_dataset(str(data_dir / f"valid.{k}"), None) for k in ("terminal", "nonterminal")]
    nll, count, windowed = 0.0, 0, 0
    with torch.no_grad():
        for i in range(len(toks)):
            y = toks[i].long()
            x = torch.cat([y.new([d.eos()]), y[:-1]])
            t_in = [torch.cat([t[i].new([NOTAG_ID]), t[i][:-1]]).long() for t in tags]
            spans = [(0, 0, min(limit, len(y)))]  # (input from, score from, to)
            while spans[-1][2] < len(y):
                hi = min(spans[-1][2] + limit // 2, len(y))
                spans.append((max(hi - limit, 0), spans[-1][2], hi))
            windowed += len(spans) > 1
            for lo, a, hi in spans:
                out = model(x[None, lo:hi], src_terminals=t_in[0][None, lo:hi], src_nonterminals=t_in[1][None, lo:hi])
                lp = torch.log_softmax(out[0].float(), -1)[0]
                nll -= lp[a - lo:].gather(-1, y[a:hi, None]).sum().item()
                count += hi - a
    return nll, count, windowed


def test_long_sentences_scored_in_windows(data_dir, trained):
    ckpt, _ = trained("txl-position", data_dir)
    model, task = load(str(ckpt), str(data_dir))
    model.eval()
    task.args.sample_break_mode = "eos"
    task.load_dataset("valid")
    d = task.source_dictionary
    itr = task.eval_lm_dataloader(dataset=task.dataset("valid"), batch_size=4, max_positions=LIMIT)
    scorer = SequenceScorer(task.target_dictionary)
    nll, count, tag_targets = 0.0, 0, 0
    with torch.no_grad():
        for sample in itr:
            tag_targets += int((sample["terminal_target"] >= FIRST_TAG_ID).sum())
            assert sample["net_input"]["src_tokens"].size(1) <= LIMIT
            for hypo in scorer.generate([model], sample):
                nll -= hypo[0]["positional_scores"].sum().item()
                count += hypo[0]["positional_scores"].numel()
    ref_nll, ref_count, windowed = _independent_nll(model, data_dir, d, LIMIT)
    terminal = data_utils.load_indexed_dataset(str(data_dir / "valid.terminal"), None)
    words = int(sum((terminal[i] >= FIRST_TAG_ID).sum() for i in range(len(terminal))))
    assert windowed > 10  # most toy sentences are longer than 16 subwords
    assert count == ref_count == int(np.sum(task.dataset("valid").sizes)) == itr.scored
    assert abs(nll - ref_nll) < 1e-4 * abs(ref_nll), (nll, ref_nll)
    assert tag_targets == words  # every word's tags predicted exactly once, none from a window's context


def test_scored_tokens_raises_on_nothing():
    class Dict:
        def pad(self):
            return 1

        def bos(self):
            return 0

    empty = ScoredTokens([], "valid", 1234, Dict(), False, "too long")
    with pytest.raises(EvaluationError, match="split 'valid': no token scored of 1234"):
        list(empty)
    some = ScoredTokens([{"target": torch.tensor([[5, 6, 1], [0, 7, 8]])}], "valid", 10, Dict(), True, "too long")
    assert len(list(some)) == 1 and some.scored == 4  # pad and <s> are not scored


def _eval_lm(data_dir, ckpt, *extra):
    cmd = [BIN / "fairseq-eval-lm", data_dir, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--path", ckpt,
           "--gen-subset", "valid", "--num-workers", "0", *extra]
    return launcher.run(cmd, env=ENV, timeout=300)


def test_readme_eval_lm_command(data_dir, trained):
    """docs/evaluation.md's fairseq-eval-lm line (formerly README section 3) as written (no
    --tokens-per-sample: blocks of 1024 for a 64-position model) printed 'Evaluated 0 tokens ...
    Perplexity: 1.00' and exited 0."""
    ckpt, _ = trained("txl-position", data_dir)
    proc = _eval_lm(data_dir, ckpt)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    valid = data_utils.load_indexed_dataset(str(data_dir / "valid"), None)
    total = int(valid.sizes.sum())  # (keep the dataset alive: its sizes are a view of the mmap)
    assert f"split 'valid': scored {total} of {total} tokens; none left out" in out
    assert re.search(rf"Evaluated {total:,} tokens", out)
    ppl = float(re.search(r"Perplexity: ([\d.]+)", out).group(1))
    assert math.isfinite(ppl) and ppl > 2


def test_eval_lm_scoring_nothing_exits_1(data_dir, trained):
    """With --add-bos-token long blocks are not windowed: nothing fits the 64 positions, so no perplexity."""
    ckpt, _ = trained("txl-position", data_dir)
    proc = _eval_lm(data_dir, ckpt, "--add-bos-token")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert len(errors) == 1 and "split 'valid': no token scored of" in errors[0], proc.stderr[-2000:]
    assert "Perplexity" not in proc.stdout + proc.stderr


def test_eval_lm_negative_context_window_one_line(data_dir, trained):
    """Issue 24.3: a negative --context-window was accepted and left tokens out (reported only on
    stderr); fairseq-eval-lm --task hexatag_lm now stops with one line and exit status 1."""
    ckpt, _ = trained("txl-position", data_dir)
    proc = _eval_lm(data_dir, ckpt, "--context-window", "-3")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert errors == ["sipe_fairseq: error: --context-window -3: expected an integer >= 0 (tokens of left context "
                      "before each scored piece)"], proc.stderr[-2000:]
    assert "Perplexity" not in proc.stdout + proc.stderr

"""End to end: toy CoNLL-U -> sipe-preprocess -> fairseq-train -> fairseq-eval-lm / sipe-eval-lm."""
import math
import re
import shutil

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq
from fairseq.data import data_utils

sipe_fairseq.register()

from sipe_fairseq.checkpoints import load_lm as load  # noqa: E402
from sipe_fairseq.cli.eval_lm import evaluate_lm  # noqa: E402
from sipe_fairseq.modules.assembly import INJECTION_CHOICES  # noqa: E402
from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID  # noqa: E402

from conftest import BIN, LM_TASK, PLUGIN, run, txl  # noqa: E402

TASK = ["--task", "hexatag_lm", "--tokens-per-sample", "64", "--sample-break-mode", "complete"]
CONFIGS = {  # name -> training arguments (conftest's checkpoint cache shares txl-none and txl-position with other files)
    **{f"txl-{inj}": txl(inj) for inj in INJECTION_CHOICES},
    **{f"rope-{inj}": [*LM_TASK, "--arch", "sipe_rope_tiny", "--sipe-injection", inj] for inj in ("none", "input", "position")},
    "abs-input": [*LM_TASK, "--arch", "sipe_transformer_lm_tiny"],
}


@pytest.fixture(scope="module")
def data_dir(toy_data):
    return toy_data


@pytest.fixture(scope="module")
def trained(train_checkpoint):
    def trained(name, data_dir):
        """Train config ``name`` for a few updates (once per session); return (checkpoint, training log)."""
        ckpt = train_checkpoint(CONFIGS[name], data_dir)
        return ckpt, train_checkpoint.log(ckpt)
    return trained


@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_then_eval_lm(name, data_dir, trained):
    """fairseq-train and fairseq-eval-lm run for every injection; the perplexity fairseq-eval-lm
    prints from the reloaded checkpoint equals the training run's final validation (in memory),
    and sipe-eval-lm computes the same number."""
    ckpt, log = trained(name, data_dir)
    valid = re.findall(r"valid on 'valid' subset \| loss [\d.]+ \| nll_loss ([\d.]+)", log)
    out = run([BIN / "fairseq-eval-lm", data_dir, "--user-dir", PLUGIN, *TASK, "--path", ckpt,
               "--gen-subset", "valid", "--max-tokens", "1024", "--num-workers", "0"], data_dir.parent)
    bits = float(re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", out).group(1))
    assert valid and abs(float(valid[-1]) - bits) < 1.5e-3, (valid, bits)
    ours = evaluate_lm(str(ckpt), str(data_dir), "valid", max_tokens=1024)
    assert abs(ours["lm"]["bits"] - bits) < 1e-3
    sees_tags = "none" not in name
    assert (ours["joint"]["nll"] > ours["lm"]["nll"]) == sees_tags
    counts = [ours[f"lm.{k}"]["count"] for k in ("eos", "word_initial", "continuation")]
    assert sum(counts) == ours["lm"]["count"] and min(counts) > 0


def test_eval_lm_equals_independent_nll(data_dir, trained):
    """exp(mean NLL) computed sentence by sentence straight from the binarized streams (no task
    datasets involved) equals fairseq-eval-lm's perplexity with --sample-break-mode eos."""
    ckpt, _ = trained("txl-position", data_dir)
    model, task = load(str(ckpt), str(data_dir))
    model.eval()
    d = task.source_dictionary
    toks = data_utils.load_indexed_dataset(str(data_dir / "valid"), d)
    terms = data_utils.load_indexed_dataset(str(data_dir / "valid.terminal"), None)
    nts = data_utils.load_indexed_dataset(str(data_dir / "valid.nonterminal"), None)
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(len(toks)):
            y = toks[i].long()
            x = torch.cat([y.new([d.eos()]), y[:-1]])[None]
            shift = lambda t: torch.cat([t.new([FIRST_TAG_ID - 1]), t[:-1].long()])[None]  # noqa: E731
            out = model(x, src_terminals=shift(terms[i]), src_nonterminals=shift(nts[i]))
            lp = torch.log_softmax(out[0].float(), -1)[0]
            nll -= lp.gather(-1, y[:, None]).sum().item()
            n += len(y)
    out = run([BIN / "fairseq-eval-lm", data_dir, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--sample-break-mode", "eos",
               "--tokens-per-sample", "64", "--path", ckpt, "--gen-subset", "valid", "--max-tokens", "1024",
               "--output-word-probs"], data_dir.parent)
    assert len(re.findall(r"eval_lm:\d+ ", out)) == len(toks)  # one word-probability line per sentence
    ppl = float(re.search(r"Perplexity: ([\d.]+)", out).group(1))
    assert abs(math.exp(nll / n) - ppl) < 0.01 * 1.0001 + 1e-9 * ppl, (math.exp(nll / n), ppl)


def test_checkpoint_reload_gives_identical_outputs(data_dir, tmp_path, trained):
    ckpt, _ = trained("txl-position+attention-bias", data_dir)
    model, task = load(str(ckpt), str(data_dir))
    state = torch.load(str(ckpt), map_location="cpu", weights_only=False)  # the raw checkpoint as fairseq wrote it
    state["model"] = model.state_dict()  # ... re-saved from the loaded model
    torch.save(state, str(tmp_path / "copy.pt"))
    again, _ = load(str(tmp_path / "copy.pt"), str(data_dir))
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(4)])
    model.eval(), again.eval()
    with torch.no_grad():
        a, b = model(**batch["net_input"]), again(**batch["net_input"])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1]["terminal_logits"], b[1]["terminal_logits"])


@pytest.mark.parametrize("mode,bos,placement", [("none", False, "first_subword"), ("complete", False, "first_subword"),
                                                ("eos", False, "first_subword"), ("none", True, "first_subword"),
                                                ("complete", True, "last_subword"), ("none", False, "last_subword")])
def test_tags_stay_in_step_through_blocking(data_dir, mode, bos, placement, trained):
    """Whatever the break mode, --add-bos-token and head placement: tags sit exactly on the tokens
    whose piece starts a word, and every word in a block has its tags predicted exactly once, from
    a position whose input precedes the word."""
    ckpt, _ = trained("txl-position", data_dir)
    _, task = load(str(ckpt), str(data_dir))
    task.args.sample_break_mode, task.args.add_bos_token, task.args.tag_head_placement = mode, bos, placement
    task.load_dataset("valid")
    ds, d = task.dataset("valid"), task.source_dictionary
    starts = torch.tensor([d[i].startswith("\u2581") for i in range(len(d))])
    for i in range(len(ds)):
        b = ds.collater([ds[i]])
        src, tags = b["net_input"]["src_tokens"][0], b["net_input"]["src_terminals"][0]
        assert torch.equal(tags >= FIRST_TAG_ID, starts[src]), (mode, bos, i)
        words = b["word_start_target"][0].sum()
        predicted = (b["terminal_target"][0] >= FIRST_TAG_ID).sum()
        assert predicted == words
        if placement == "last_subword":  # the head sits right before the word
            assert torch.equal(b["terminal_target"][0] >= FIRST_TAG_ID, b["word_start_target"][0].bool())
        assert torch.equal(b["word_start_target"][0].bool(), starts[b["target"][0]] & b["target"][0].ne(d.pad()))


def test_context_window_keeps_tags_in_step(data_dir, trained):
    """With --context-window, every row is a contiguous slice of the token+tag stream."""
    ckpt, _ = trained("txl-position", data_dir)
    model, task = load(str(ckpt), str(data_dir), context_window=16)
    task.args.sample_break_mode = "none"
    task.load_dataset("valid")
    d = task.source_dictionary
    flat = lambda name, dd: torch.cat([x for x in data_utils.load_indexed_dataset(str(data_dir / name), dd)])  # noqa: E731
    stream = torch.stack([flat("valid", d), flat("valid.terminal", None), flat("valid.nonterminal", None)], 1).long()
    itr = task.eval_lm_dataloader(dataset=task.dataset("valid"), batch_size=2, max_positions=1024, context_window=16)
    pos, rows = 0, 0
    for b in itr:
        net = b["net_input"]
        for r in range(net["src_tokens"].size(0)):
            keep = net["src_tokens"][r].ne(d.pad())
            row = torch.stack([net["src_tokens"][r], net["src_terminals"][r], net["src_nonterminals"][r]], 1)[keep]
            c = b["start_indices"][r]
            n = int(b["target"][r].ne(d.pad()).sum())
            # inputs are the stream shifted by one: row covers stream[pos - c - 1 : pos + n - 1]
            lo = pos - c - 1
            expect = stream[max(lo, 0):pos + n - 1]
            assert len(row) == len(expect) + (lo < 0) and torch.equal(row[-len(expect):], expect), (rows, r)
            assert torch.equal(b["target"][r][c:c + n], stream[pos:pos + n, 0])
            pos += n
            rows += 1
    assert pos == len(stream) and rows > 2


def test_missing_tag_streams_is_a_clear_error(data_dir, tmp_path, trained):
    plain = tmp_path / "plain"
    shutil.copytree(data_dir, plain)
    for f in plain.glob("valid.terminal.*"):
        f.unlink()
    ckpt, _ = trained("txl-position", data_dir)
    _, task = load(str(ckpt), str(plain))
    with pytest.raises(Exception, match="sipe-preprocess"):
        task.load_dataset("valid")

"""End to end for encoders: toy CoNLL-U -> sipe-preprocess --deprel -> task hexatag_mlm (tags
masked with their tokens, deterministic per seed and epoch) -> fairseq-train for every encoder and
injection and every Table 12 strategy -> the checkpoint reloads and validates to the same loss."""
import re

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from fairseq import tasks  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.options import get_training_parser, parse_args_and_arch  # noqa: E402

from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID  # noqa: E402
from sipe_fairseq.modules.input_injection import STRATEGIES  # noqa: E402

from conftest import BIN, MLM_TASK, PLUGIN, run  # noqa: E402

TASK = ["--task", "hexatag_mlm", "--criterion", "hexatag_mlm", "--tokens-per-sample", "64", "--sample-break-mode", "complete"]
CONFIGS = {
    **{f"roberta-{i}": ["--arch", "sipe_roberta_tiny", "--sipe-injection", i] for i in ("none", "input")},
    **{f"deberta-{i}": ["--arch", "sipe_deberta_tiny", "--sipe-injection", i] for i in ("none", "input", "position")},
    **{f"modernbert-{i}": ["--arch", "sipe_modernbert_tiny", "--sipe-injection", i] for i in ("none", "input", "position")},
    **{f"roberta-{s}": ["--arch", "sipe_roberta_tiny", "--sipe-injection", "input", "--sipe-input-strategy", s, "--deprel-stream"]
       for s in STRATEGIES if s != "ADD_T_NT"},
}


@pytest.fixture(scope="module")
def data_dir(toy_data):
    return toy_data  # written with --deprel (the DEPREL strategies read the stream)


def load_task(data_dir, *extra):
    parser = get_training_parser()
    args = parse_args_and_arch(parser, [str(data_dir), "--user-dir", PLUGIN, *TASK, "--arch", "sipe_deberta_tiny", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    return tasks.setup_task(cfg.task)


def items(ds):
    """Every sample of ``ds`` as a nested dict without the batch dimension."""
    out = []
    for i in range(len(ds)):
        b = ds.collater([ds[i]])
        out.append({k: ({kk: vv[0] for kk, vv in v.items()} if isinstance(v, dict)
                        else (v[0] if torch.is_tensor(v) and v.dim() else v))
                    for k, v in b.items()})
    return out


def test_tags_are_masked_with_their_tokens_deterministically(data_dir):
    task = load_task(data_dir, "--deprel-stream")
    task.load_dataset("train")
    ds = task.dataset("train")
    pad = task.source_dictionary.pad()
    ds.set_epoch(1)
    first = items(ds)
    n_selected = n_targets = 0
    for item in first:
        net, target = item["net_input"], item["target"]
        selected = target.ne(pad)
        assert len(net["src_terminals"]) == len(net["src_tokens"]) == len(target) == len(net["src_deprels"])
        assert net["src_terminals"][0] == NOTAG_ID
        assert net["src_tokens"][0] == task.source_dictionary.bos() or selected[0]  # fairseq may mask <s> too
        for kind in ("terminals", "nonterminals", "deprels"):  # m_p = 0 wherever a token was selected
            assert (net[f"src_{kind}"][selected] == NOTAG_ID).all()
        for kind in ("terminal", "nonterminal"):
            tgt = item[f"{kind}_target"]
            assert (tgt[~selected] == 1).all()  # pad
            n_targets += int((tgt >= FIRST_TAG_ID).sum()) if kind == "terminal" else 0
        n_selected += int(selected.sum())
    assert n_selected > 0 and 0 < n_targets < n_selected
    again = items(ds)
    assert all(torch.equal(a["net_input"]["src_terminals"], b["net_input"]["src_terminals"]) for a, b in zip(first, again))
    ds.set_epoch(2)
    other = items(ds)
    assert any(not torch.equal(a["target"], b["target"]) for a, b in zip(first, other))


def test_tag_targets_are_the_original_tags_at_masked_first_subwords(data_dir):
    """Reassemble the unmasked tag stream: input tags where unselected, targets where selected."""
    from fairseq.data import data_utils

    task = load_task(data_dir)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    raw = data_utils.load_indexed_dataset(str(data_dir / "valid.terminal"), None)
    rebuilt = []
    for item in items(ds):
        selected = item["target"].ne(task.source_dictionary.pad())
        inp, tgt = item["net_input"]["src_terminals"], item["terminal_target"]
        full = torch.where(selected, torch.where(tgt >= FIRST_TAG_ID, tgt, torch.full_like(tgt, NOTAG_ID)), inp)
        rebuilt.append((item["id"], full[1:]))  # drop <s>
    # complete break mode with 64-token blocks: each block is whole sentences in order
    stream = torch.cat([raw[i] for i in range(len(raw))])
    blocks = torch.cat([t for _, t in sorted(rebuilt, key=lambda x: x[0])])
    assert torch.equal(blocks, stream)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_then_validate(name, data_dir, train_checkpoint):
    """Every encoder/injection/strategy trains a few updates; for each encoder and injection,
    fairseq-validate on the saved checkpoint reproduces the training run's last validation loss
    (same masks, same weights)."""
    ckpt = train_checkpoint([*MLM_TASK, *CONFIGS[name]], data_dir)  # shared with test_pll, test_glue_encoders, ...
    log = train_checkpoint.log(ckpt)
    valid = re.findall(r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+)", log)
    assert valid, log[-2000:]
    if "none" not in name:
        assert re.search(r"valid on 'valid' subset .*terminal_acc", log)
    if "--sipe-input-strategy" in CONFIGS[name]:
        return  # the reload check below runs once per encoder and injection
    out = run([BIN / "fairseq-validate", data_dir, "--user-dir", PLUGIN, "--task", "hexatag_mlm", "--path",
               ckpt, "--max-tokens", "1024", "--num-workers", "0", "--valid-subset", "valid"],
              data_dir.parent)
    got = re.search(r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+)", out)
    assert got and got.groups() == valid[-1], (got and got.groups(), valid[-1])


def test_mask_whole_words_selects_whole_words(data_dir, caplog):
    """--mask-whole-words: a word's subwords (a tagged first subword up to the next word) are selected
    together; the vocabulary's word starts agree with the tag streams on this data (logged)."""
    import logging

    with caplog.at_level(logging.INFO, logger="sipe_fairseq.tasks.hexatag_mlm"):
        task = load_task(data_dir, "--mask-whole-words", "--mask-prob", "0.3")
        task.load_dataset("train")
    assert re.search(r"train: --mask-whole-words over \d+ words; word starts agree", caplog.text)
    ds = task.dataset("train")
    ds.set_epoch(1)
    d = task.source_dictionary
    n_multi = 0
    for item in items(ds):
        net, target = item["net_input"], item["target"]
        selected = target.ne(d.pad())
        tokens = torch.where(selected, target, net["src_tokens"])
        tags = torch.where(selected, torch.where(item["terminal_target"] >= FIRST_TAG_ID, item["terminal_target"],
                                                 torch.full_like(target, NOTAG_ID)), net["src_terminals"])
        word = torch.cumsum(((tags >= FIRST_TAG_ID) | (tokens < d.nspecial)).long(), 0)
        for w in word.unique():
            sel = selected[word == w]
            assert sel.all() or not sel.any(), f"block {item['id']}: word {int(w)} partly masked"
            n_multi += int(sel.all() and len(sel) > 1)
    assert n_multi > 0  # some multi-subword word was masked whole


def test_word_start_check_counts_disagreements(data_dir):
    from fairseq.data import Dictionary, data_utils
    from sipe_fairseq.data.mlm_dataset import check_word_starts
    from sipe_fairseq.data.words import word_start_mask

    d = Dictionary.load(str(data_dir / "dict.txt"))
    starts = word_start_mask(d, specials=True).byte()
    assert check_word_starts(starts, str(data_dir), "valid", d) == {
        "positions": int(sum(int((t != d.eos()).sum()) for t in data_utils.load_indexed_dataset(str(data_dir / "valid"), None))),
        "words": sum(int((t >= FIRST_TAG_ID).sum())
                     for t in data_utils.load_indexed_dataset(str(data_dir / "valid.terminal"), None)),
        "differ": 0}
    tok = data_utils.load_indexed_dataset(str(data_dir / "valid"), None)
    tags = data_utils.load_indexed_dataset(str(data_dir / "valid.terminal"), None)
    s, t = next((s, t) for s in range(len(tok)) for t in range(len(tok[s]))
                if tags[s][t] < FIRST_TAG_ID and tok[s][t] != d.eos())  # the first continuation subword
    cont = int(tok[s][t])
    starts[cont] = 1  # pretend that piece starts a word
    out = check_word_starts(starts, str(data_dir), "valid", d)
    n = sum(int(((x == cont) & (y < FIRST_TAG_ID)).sum()) for x, y in zip(tok, tags))
    assert out["differ"] == n > 0
    assert out["first"] == {"sentence": s, "token": t, "piece": d[cont], "tag_stream_says": "continuation"}

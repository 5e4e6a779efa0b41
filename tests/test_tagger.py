"""Hexatagger: task/model/criterion train under fairseq-train; evaluation and the sipe-tag backend."""
import json

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.cli.preprocess import main as preprocess_main  # noqa: E402
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID  # noqa: E402
from sipe_fairseq.checkpoints import load_tagger  # noqa: E402
from sipe_fairseq.eval.tagger import evaluate_tagger  # noqa: E402
from sipe_fairseq.hexatag import decode, parse_tags  # noqa: E402

from conftest import PLUGIN, TOY  # noqa: E402

TAGGER = ["--user-dir", PLUGIN, "--task", "hexatag_tagging", "--criterion", "hexatag_tagging", "--arch", "sipe_tagger_tiny"]


@pytest.fixture(scope="module")
def trained(toy_data, train_checkpoint):
    ckpt = train_checkpoint(TAGGER)
    log = train_checkpoint.log(ckpt)
    assert "terminal_acc" in log and "pair_acc" in log
    return toy_data, ckpt


class Oracle(torch.nn.Module):
    """Returns one-hot logits of the gold tags (looked up by the token sequence)."""

    def __init__(self, ds, pad):
        super().__init__()
        self.pad, self.gold = pad, {}
        for j in range(len(ds)):
            it = ds[j]
            self.gold[tuple(it["net_input.src_tokens"].tolist())] = (it["terminal_target"], it["nonterminal_target"])

    def forward(self, src):
        b, t = src.shape
        term, nont = torch.zeros(b, t, 2), torch.zeros(b, t, 5)
        for k in range(b):
            toks = tuple(x for x in src[k].tolist() if x != self.pad)
            gt, gn = self.gold[toks]
            for p in range(len(gt)):
                if gt[p] >= FIRST_TAG_ID:
                    term[k, p, gt[p] - FIRST_TAG_ID] = 10
                    nont[k, p, gn[p] - FIRST_TAG_ID] = 10
        return term, nont


def test_evaluate(trained):
    data, ckpt = trained
    model, task = load_tagger(str(ckpt), str(data))
    scores = evaluate_tagger(model, task, "test")
    assert scores["sentences"] == TOY["n_test"] == 40 and 0 <= scores["uas"] <= 100
    task.load_dataset("test")
    oracle = Oracle(task.datasets["test"], task.source_dictionary.pad())
    perfect = evaluate_tagger(oracle, task, "test", batch_size=7)
    assert perfect["uas"] == 100.0 and perfect["exact_match"] == 100.0 and perfect["words"] == scores["words"]


def test_sipe_eval_tagger_command(trained, tmp_path, capsys):
    """``sipe-eval tagger`` prints the scores of :func:`evaluate_tagger` and writes them with ``--json``."""
    import json

    from sipe_fairseq.cli.eval import main as eval_main

    data, ckpt = trained
    out = tmp_path / "tagger.json"
    assert eval_main(["tagger", "--data", str(data), "--path", str(ckpt), "--json", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert f"test: sentences {scores['sentences']}, words {scores['words']}, UAS {scores['uas']:.2f}" in capsys.readouterr().out


def test_model_masks_padding(trained):
    data, ckpt = trained
    model, _ = load_tagger(str(ckpt), str(data))
    x = torch.tensor([[10, 11, 12, 2]])
    padded = torch.cat([x, torch.full((1, 3), model.padding_idx)], 1)
    a, b = model(x), model(padded)
    assert torch.allclose(a[0], b[0][:, :4], atol=1e-5) and torch.allclose(a[1], b[1][:, :4], atol=1e-5)


def test_sipe_tag_hexatagger_backend(trained, tmp_path):
    from sipe_fairseq.cli.tag import main

    _, ckpt = trained
    lines = ["the dog that the cats see runs", "", "the cat sleeps ."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    tags = tmp_path / "out.tags"
    status = main([str(src), "--backend", f"hexatagger:{ckpt}", "--tags-out", str(tags), "--no-progress",
                   "-o", str(tmp_path / "out.conllu")])
    assert status == 1  # the empty line
    out = tags.read_text().split("\n")[:-1]
    assert len(out) == 3 and out[1] == ""
    for line, tag_line in zip(lines, out):
        if line:
            assert len(decode(parse_tags(tag_line))) == len(line.split())


def test_preprocess_text_with_hexatagger(trained, tmp_path):
    """sipe-preprocess --input-format text with a backend that needs no spaCy (2 backend workers)
    equals sipe-tag followed by sipe-preprocess on its CoNLL-U."""
    from sipe_fairseq.cli.tag import main as tag_main

    _, ckpt = trained
    src = tmp_path / "train.txt"
    src.write_text("the dog that the cats see runs\n\nthe cat sleeps .\nthe cats see the dog .\n")
    assert tag_main([str(src), "-o", str(tmp_path / "train.conllu"), "--backend", f"hexatagger:{ckpt}",
                     "--no-progress"]) == 1  # the empty line
    assert preprocess_main(["--train", str(tmp_path / "train.conllu"), "--destdir", str(tmp_path / "two"),
                            "--no-split", "--no-progress"]) == 0
    assert preprocess_main(["--input-format", "text", "--backend", f"hexatagger:{ckpt}", "--workers", "2",
                            "--batch-size", "2", "--train", str(src), "--destdir", str(tmp_path / "one"),
                            "--no-split", "--no-progress"]) == 0
    names = sorted(p.name for p in (tmp_path / "two").iterdir() if p.name != "manifest.json")
    assert "train.terminal.bin" in names
    assert names == sorted(p.name for p in (tmp_path / "one").iterdir() if p.name != "manifest.json")
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    stats = json.loads((tmp_path / "one" / "manifest.json").read_text())["splits"]["train"]
    assert (stats["lines_read"], stats["empty_lines_skipped"], stats["sentences"]) == (4, 1, 3)

"""Hexatagger encoders: --init-encoder from a hexatag_mlm (sipe_*) or fairseq roberta checkpoint,
--encoder-arch from scratch; dictionary checks; SiPE injections stay inert (no tags as input)."""
import logging
import shutil

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from fairseq import checkpoint_utils, tasks  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.options import get_training_parser, parse_args_and_arch  # noqa: E402

from sipe_fairseq.cli.preprocess import main as preprocess_main  # noqa: E402
from sipe_fairseq.data import toy_grammar  # noqa: E402
from sipe_fairseq.data.tag_dictionary import NOTAG_ID  # noqa: E402
from sipe_fairseq.checkpoints import load_tagger  # noqa: E402
from sipe_fairseq.checkpoints.compat import allow_fairseq_checkpoint_globals  # noqa: E402
from sipe_fairseq.hexatag import decode, parse_tags  # noqa: E402
from sipe_fairseq.hexatag.errors import CheckpointError, OptionError  # noqa: E402

from conftest import BIN, MLM_TASK, PLUGIN, STOCK_MLM, run  # noqa: E402

COMMON = ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024", "--seed", "1", "--num-workers", "0",
          "--no-epoch-checkpoints", "--no-last-checkpoints", "--log-format", "simple"]
MLM = {  # name -> (prefix in the checkpoint's weights, fairseq-train arguments: conftest's cache shares the first two)
    "deberta": ("encoder.", [*MLM_TASK, "--arch", "sipe_deberta_tiny", "--sipe-injection", "none"]),
    "roberta": ("encoder.sentence_encoder.", STOCK_MLM),
    "modernbert-injected": ("encoder.", [*MLM_TASK, "--arch", "sipe_modernbert_tiny", "--sipe-injection", "input+attention-bias",
                                         "--sipe-input-strategy", "CONCAT_T_NT", "--sipe-proj-init-std", "0.1",
                                         "--max-update", "2"]),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory, toy_data, train_checkpoint):
    """{"data": the standard toy data, "other": a data directory with a different dictionary (its own corpus:
    seed 5 and --spm-vocab-size 150, so that the two dictionaries differ), "train": the checkpoint cache}."""
    other = tmp_path_factory.mktemp("tagger_init")
    toy_grammar.make_corpus(other / "toy", n_train=300, n_valid=40, n_test=40, seed=5)
    assert preprocess_main(["--train", str(other / "toy/train.conllu"), "--valid", str(other / "toy/valid.conllu"),
                            "--test", str(other / "toy/test.conllu"), "--destdir", str(other / "data"),
                            "--spm-vocab-size", "150"]) == 0
    return {"data": toy_data, "other": other / "data", "train": train_checkpoint}


def mlm(root, name):
    """A tiny pre-trained checkpoint on the toy data (trained once per session)."""
    return root["train"](MLM[name][1])


def build(data, *extra, from_checkpoint=False):
    """(task, model, cfg) for a sipe_tagger on ``data`` as fairseq-train builds it."""
    args = parse_args_and_arch(get_training_parser(), [str(data), "--user-dir", PLUGIN, "--task", "hexatag_tagging",
                                                       "--criterion", "hexatag_tagging", "--arch", "sipe_tagger", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model, from_checkpoint=from_checkpoint), cfg


def weights(path):
    return torch.load(str(path), map_location="cpu", weights_only=False)["model"]


def batch(task, n=3):
    task.load_dataset("valid")
    ds = task.datasets["valid"]
    return ds.collater([ds[i] for i in range(n)])


@pytest.mark.parametrize("name", ["deberta", "roberta"])
def test_init_encoder_copies_the_checkpoint(root, name, caplog):
    ck = mlm(root, name)
    prefix = MLM[name][0]
    caplog.set_level(logging.INFO)
    task, model, cfg = build(root["data"], "--init-encoder", str(ck))
    theirs = weights(ck)
    ours = model.encoder.state_dict()
    assert ours and all(torch.equal(v, theirs[prefix + k]) for k, v in ours.items())
    body = {k for k in theirs if k.startswith(prefix) and ".lm_head." not in k}
    assert {prefix + k for k in ours} == body  # the whole body, nothing else
    assert not any("lm_head" in k for k in model.state_dict())
    assert model.encoder.embed_tokens.weight.size(0) == len(task.source_dictionary) + 1  # pre-training's <mask>
    assert '"kind": "%s"' % ("sipe" if name == "deberta" else "roberta") in cfg.model.encoder_spec  # saved with the tagger
    log = caplog.text
    assert f"loaded {len(ours)} tensors" in log and "new (initialized here): terminal_head.weight" in log
    assert "dropped from the checkpoint: encoder.lm_head.weight" in log
    # the tagger's logits need no tags and ignore padding
    model.eval()
    sample = batch(task)
    src = sample["net_input"]["src_tokens"]
    term, nont = model(src)
    assert term.shape == (*src.shape, 2) and nont.shape == (*src.shape, 5)
    pad = torch.full((src.size(0), 4), task.source_dictionary.pad())
    term_padded, _ = model(torch.cat([src, pad], 1))
    assert torch.allclose(term, term_padded[:, :src.size(1)], atol=1e-5)
    if name == "roberta":  # learned absolute positions: 64, one taken by <s>
        assert model.max_positions() == 63
        with pytest.raises(ValueError, match="longer than the encoder's 63 positions"):
            model(torch.full((1, 64), 10))


@pytest.mark.parametrize("name", ["deberta", "roberta"])
def test_train_and_tag_from_pretrained(root, name, tmp_path):
    from sipe_fairseq.cli.tag import main

    init = tmp_path / "init.pt"
    shutil.copy(mlm(root, name), init)
    save = tmp_path / "ck"
    log = run([BIN / "fairseq-train", root["data"], "--user-dir", PLUGIN, "--task", "hexatag_tagging",
               "--criterion", "hexatag_tagging", "--arch", "sipe_tagger", "--init-encoder", init, *COMMON,
               "--max-update", "3", "--save-dir", save], tmp_path)
    assert "--init-encoder" in log and "new (initialized here): terminal_head.weight" in log and "pair_acc" in log
    before = weights(init)
    init.unlink()  # the tagger checkpoint is self-contained
    model, _ = load_tagger(str(save / "checkpoint_best.pt"))
    prefix = MLM[name][0]
    emb = model.encoder.embed_tokens.weight
    assert emb.shape == before[prefix + "embed_tokens.weight"].shape
    assert not torch.equal(emb, before[prefix + "embed_tokens.weight"])  # fine-tuned
    lines = ["the dog that the cats see runs", "the cat sleeps ."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    tags = tmp_path / "out.tags"
    assert main([str(src), "--backend", f"hexatagger:{save / 'checkpoint_best.pt'}", "--tags-out", str(tags),
                 "--no-progress"]) == 0
    out = tags.read_text().split("\n")[:-1]
    assert len(out) == 2
    for line, tag_line in zip(lines, out):
        heads = decode(parse_tags(tag_line))  # constrained decoding: always a valid projective tree
        assert len(heads) == len(line.split()) and heads.count(0) == 1


def test_mismatched_dictionary_is_refused(root):
    ck = mlm(root, "deberta")
    with pytest.raises(CheckpointError, match="dictionary mismatch") as err:
        build(root["other"], "--init-encoder", str(ck))
    msg = str(err.value)
    assert str(root["other"] / "dict.txt") in msg and str(root["data"] / "dict.txt") in msg
    assert "first difference at id" in msg


def test_dictionary_not_found_then_given(root, tmp_path):
    state = torch.load(str(mlm(root, "deberta")), map_location="cpu", weights_only=False)
    state["cfg"]["task"]["data"] = str(tmp_path / "moved")  # the pre-training data directory is gone
    ck = tmp_path / "moved.pt"
    torch.save(state, ck)
    with pytest.raises(CheckpointError, match="--init-encoder-dict"):
        build(root["data"], "--init-encoder", str(ck))
    with pytest.raises(OptionError, match="--init-encoder-dict .*: no such file"):
        build(root["data"], "--init-encoder", str(ck), "--init-encoder-dict", str(tmp_path / "none.txt"))
    with pytest.raises(CheckpointError, match="dictionary mismatch"):
        build(root["data"], "--init-encoder", str(ck), "--init-encoder-dict", str(root["other"] / "dict.txt"))
    _, model, _ = build(root["data"], "--init-encoder", str(ck), "--init-encoder-dict", str(root["data"] / "dict.txt"))
    assert torch.equal(model.encoder.embed_tokens.weight, state["model"]["encoder.embed_tokens.weight"])


def test_injected_checkpoint_loads_with_tags_masked(root, caplog):
    """A SiPE checkpoint with injections loads whole; the tagger feeds every position as untagged
    (m_p = 0), so it computes exactly what the pre-trained encoder computes on all-masked tags,
    and real tags would change it (the injection is live in the checkpoint)."""
    ck = mlm(root, "modernbert-injected")
    caplog.set_level(logging.INFO)
    task, model, _ = build(root["data"], "--init-encoder", str(ck))
    assert model.encoder.needs_tags and model.encoder.fusion is not None
    inert = next(r.getMessage() for r in caplog.records if "contribute nothing" in r.getMessage())
    assert "encoder.tags.terminal" in inert and "attn.injections." in inert and "fusion" not in inert
    # process-wide, as the package does (a torch.serialization.safe_globals context would remove argparse.Namespace
    # from the allowlist on exit, and a later test loading fairseq's roberta in this process would be refused)
    allow_fairseq_checkpoint_globals()
    (pre,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(ck)], arg_overrides={"data": str(root["data"])})
    model.eval(), pre.eval()
    sample = batch(task)
    src = sample["net_input"]["src_tokens"]
    tokens = torch.cat([torch.full((src.size(0), 1), task.source_dictionary.bos()), src], 1)
    notag = torch.full_like(tokens, NOTAG_ID)
    with torch.no_grad():
        ours = model._features(src)
        masked = pre.encoder.extract_features(tokens, notag, notag)[0][:, 1:]
        tag = lambda t: torch.cat([torch.full((src.size(0), 1), NOTAG_ID), t], 1)  # noqa: E731
        tagged = pre.encoder.extract_features(tokens, tag(sample["terminal_target"]), tag(sample["nonterminal_target"]))[0][:, 1:]
    real = src.ne(task.source_dictionary.pad())
    assert torch.allclose(ours[real], masked[real], atol=1e-5)
    assert not torch.allclose(ours[real], tagged[real], atol=1e-3)


def test_encoder_arch_from_scratch_and_rebuild(root):
    task, model, cfg = build(root["data"], "--encoder-arch", "sipe_roberta_tiny", "--encoder-dropout", "0.0")
    assert cfg.model.encoder_spec and model.encoder.embed_tokens.weight.size(0) == len(task.source_dictionary)
    assert model.max_positions() == task.max_positions() and model.encoder.cfg.dropout == 0.0
    assert not model.encoder.needs_tags and model.encoder.lm_head is None
    # a checkpoint's config rebuilds the same model without --encoder-arch being resolved again
    _, again, _ = build(root["data"], "--encoder-spec", cfg.model.encoder_spec, from_checkpoint=True)
    again.load_state_dict(model.state_dict())
    model.eval(), again.eval()
    src = batch(task)["net_input"]["src_tokens"]
    assert torch.equal(model(src)[0], again(src)[0])


@pytest.mark.parametrize("extra, match", [
    (["--encoder-arch", "sipe_deberta_tiny", "--init-encoder", "x.pt"], "give one"),
    (["--encoder-arch", "transformer_lm"], "not an encoder the tagger can use"),
    (["--init-encoder", "/nonexistent/ck.pt"], "no such file"),
])
def test_bad_encoder_options(root, extra, match):
    with pytest.raises((ValueError, CheckpointError), match=match):
        build(root["data"], *extra)

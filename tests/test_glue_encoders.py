"""GLUE fine-tuning of the masked-LM encoders (sipe_roberta, sipe_deberta, sipe_modernbert) and of
fairseq's own ``roberta`` (no tags) through ``hexatag_sentence_prediction``, with the RoBERTa recipe:
``--restore-file MLM --reset-optimizer --reset-dataloader --reset-meters --init-token 0
--separator-token 2 --add-mask-symbol``, the body rebuilt from the checkpoint's settings
(``sipe_fairseq.checkpoints.model_flags``). The fake parser and the inline GLUE files come from
test_glue.py."""
import ast
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from omegaconf import OmegaConf

from sipe_fairseq.cli.glue_preprocess import main as glue_main
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.checkpoints.model_flags import model_flags
from sipe_fairseq.eval import glue as glue_eval
import launcher
from conftest import MLM_TASK, ROOT, STOCK_MLM
from test_glue import BIN, ENV, PLUGIN, RTE, _stream, make_task, run, write_task  # also registers the fake parser

HEAD = "classification_heads.sentence_classification_head."
TPS = 64  # MLM --tokens-per-sample: sipe_roberta's and roberta's learned positions cover this many tokens
ENCODERS = {  # name -> (task and criterion, model) of the MLM pre-training (--tokens-per-sample TPS)
    "sipe_roberta": (MLM_TASK, ["--arch", "sipe_roberta_tiny", "--sipe-injection", "input"]),
    "sipe_deberta": (MLM_TASK, ["--arch", "sipe_deberta_tiny", "--sipe-injection", "position"]),
    "sipe_modernbert": (MLM_TASK, ["--arch", "sipe_modernbert_tiny", "--sipe-injection", "position"]),
    "roberta": (STOCK_MLM[:STOCK_MLM.index("--arch")] + STOCK_MLM[STOCK_MLM.index("--tokens-per-sample"):],  # fairseq's,
                STOCK_MLM[STOCK_MLM.index("--arch"):STOCK_MLM.index("--tokens-per-sample")]),  # reads dict.txt and tokens
}
assert all(t[t.index("--tokens-per-sample") + 1] == str(TPS) for t in (MLM_TASK, STOCK_MLM))
RECIPE = ["--task", "hexatag_sentence_prediction", "--criterion", "sentence_prediction", "--num-classes", "2",
          "--init-token", "0", "--separator-token", "2", "--add-mask-symbol"]


def synthetic_rte(n=240, seed=0):
    """RTE-format pairs whose label is decided by the adjective of the *second* sentence (after the
    ``</s> </s>`` separator, far from the ``<s>`` the encoders classify from). (train, dev) texts."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        subj = rnd.choice(["the door", "the bell", "the dog", "a cat"])
        a1, a2 = rnd.choice(["old", "new"]), rnd.choice(["old", "new"])
        filler = " ".join(rnd.choice(["very", "quite", "so"]) for _ in range(rnd.randint(0, 3)))
        label = "entailment" if a2 == "old" else "not_entailment"
        rows.append(f"{i}\t{subj} is {filler} {a1} there .\t{subj} is {a2} .\t{label}\n")
    head = "index\tsentence1\tsentence2\tlabel\n"
    return head + "".join(rows[: n * 5 // 6]), head + "".join(rows[n * 5 // 6:])


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, toy_data, train_checkpoint):
    """Toy sipe-preprocess data, two GLUE directories (inline RTE; synthetic pairs) and every
    encoder MLM-pre-trained for a few updates (in parallel, shared with the other files through conftest's cache)."""
    root = tmp_path_factory.mktemp("glue-enc")
    data = toy_data
    glue = {}
    train, dev = synthetic_rte()
    for key, folder, text, dev_text in (("rte", "RTE", RTE, None), ("pair", "PAIR", train, dev)):
        src = write_task(root / "glue", folder, text, dev_text)
        glue[key] = root / f"bin-{key}"
        assert glue_main(["--task-name", "rte", "--glue-dir", str(src), "--pretrain-data", str(data),
                          "--destdir", str(glue[key]), "--parser", "glue-fake"]) == 0
    ckpts = train_checkpoint.many([[*task, *model] for task, model in ENCODERS.values()])
    return {"root": root, "data": data, "glue": glue, "ckpt": dict(zip(ENCODERS, ckpts))}


def encoder_task(data, **overrides):
    return make_task(data, **{"init_token": 0, "separator_token": 2, "add_mask_symbol": True, "max_positions": TPS, **overrides})


def model_cfg(state):
    """The saved model config: a DictConfig (dataclass models) or an argparse.Namespace (fairseq's roberta)."""
    cfg = state["cfg"]["model"]
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)) if OmegaConf.is_config(cfg) else cfg


# ----------------------------------------------------------------------------- inputs


def test_encoder_inputs_match_pretraining(pretrained):
    """The RoBERTa recipe gives <s> s1 </s> </s> s2 </s> with tags <notag> t1 <notag> t2 (</s>
    carries <notag> in the streams); the dictionary is the MLM task's (dict.txt + <mask>, same
    index), and the <s> starting every hexatag_mlm block carries <notag> too."""
    from sipe_fairseq.tasks.hexatag_mlm import HexatagMLMConfig, HexatagMaskedLMTask

    glue = pretrained["glue"]["rte"]
    task = encoder_task(glue)
    cfg = OmegaConf.structured(HexatagMLMConfig)
    cfg.data, cfg.tokens_per_sample, cfg.sample_break_mode, cfg.seed = str(pretrained["data"]), TPS, "complete", 1
    mlm = HexatagMaskedLMTask.setup_task(cfg)
    d = task.source_dictionary
    assert d.symbols == mlm.source_dictionary.symbols and d.index("<mask>") == mlm.mask_idx == len(d) - 1
    mlm.load_dataset("valid")
    blocks = mlm.dataset("valid")
    mb = blocks.collater([blocks[i] for i in range(len(blocks))])["net_input"]
    assert mb["src_tokens"][:, 0].eq(d.bos()).sum() > len(blocks) // 2  # <s> (unless masked)
    assert mb["src_terminals"][:, 0].eq(NOTAG_ID).all() and mb["src_nonterminals"][:, 0].eq(NOTAG_ID).all()

    task.load_dataset("train")
    ds = task.dataset("train")
    b = ds.collater([ds[i] for i in range(len(ds))])
    net = b["net_input"]
    toks = [_stream(glue / f"input{j}/train") for j in (0, 1)]
    for r, i in enumerate(b["id"].tolist()):
        t0, t1 = toks[0][i].tolist(), toks[1][i].tolist()
        n = 1 + len(t0) + 1 + len(t1)
        assert net["src_tokens"][r, :n].tolist() == [d.bos()] + t0 + [d.eos()] + t1 and net["src_lengths"][r] == n
        assert net["src_tokens"][r, len(t0): len(t0) + 2].tolist() == [d.eos(), d.eos()]  # </s> </s> between
        for kind, key in (("terminal", "src_terminals"), ("nonterminal", "src_nonterminals")):
            g0, g1 = (_stream(glue / f"input{j}/train.{kind}")[i].tolist() for j in (0, 1))
            assert net[key][r, :n].tolist() == [NOTAG_ID] + g0 + [NOTAG_ID] + g1, (kind, r)
            row = net[key][r, :n]
            assert row[net["src_tokens"][r, :n].le(d.eos())].eq(NOTAG_ID).all()  # <s> and every </s>
            assert net[key][r, n:].lt(FIRST_TAG_ID).all()
    assert net["src_terminals"].ge(FIRST_TAG_ID).any()  # parsed sentences carry real tags


# ----------------------------------------------------------------------------- checkpoint loading


@pytest.mark.parametrize("name", list(ENCODERS))
def test_mlm_checkpoint_loads_with_only_the_head_new(pretrained, name):
    """Every MLM weight (the LM head included) lands in the classifier unchanged and only the
    head's keys are new; classification reads <s> and ignores padding."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(pretrained["ckpt"][name]))
    mcfg = model_cfg(state)
    task = encoder_task(pretrained["glue"]["pair"])
    model = task.build_model(mcfg)
    mlm = {k: v.clone() for k, v in state["model"].items()}
    model.load_state_dict(state["model"], strict=True, model_cfg=mcfg)
    own = model.state_dict()
    head_params = ("dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias")
    assert {k for k in own if k not in mlm} == {HEAD + p for p in head_params}
    assert all(torch.equal(own[k], v) for k, v in mlm.items())
    assert any(k.startswith("encoder.lm_head.") for k in own)  # kept, as fairseq's RoBERTa
    if name != "roberta":
        assert model.encoder.needs_tags  # the checkpoint's injection, from its saved settings
    model.eval()
    task.load_dataset("valid")
    ds = task.dataset("valid")
    b = ds.collater([ds[i] for i in range(8)])
    assert b["net_input"]["src_tokens"].ne(1).sum(1).unique().numel() > 1  # rows of several lengths: padding
    with torch.no_grad():
        logits, _ = model(**b["net_input"], classification_head_name="sentence_classification_head")
        assert logits.shape == (8, 2) and torch.isfinite(logits).all()
        feats, _ = model.encoder(**b["net_input"], features_only=True)  # the head reads <s> (position 0)
        head = model.classification_heads["sentence_classification_head"]
        pooled = head(feats) if name == "roberta" else head(feats[:, 0])  # roberta's pools itself
        assert torch.allclose(pooled, logits, atol=1e-6)
        for r in range(8):
            alone, _ = model(**ds.collater([ds[int(b["id"][r])]])["net_input"],
                             classification_head_name="sentence_classification_head")
            assert torch.allclose(alone[0], logits[r], atol=1e-5), r


def test_mismatched_body_fails_with_hints(pretrained):
    """A model that does not match the checkpoint fails strictly, naming the usual cause."""
    def load(name, task, **changes):
        state = checkpoint_utils.load_checkpoint_to_cpu(str(pretrained["ckpt"][name]))
        mcfg = model_cfg(state)
        for k, v in changes.items():
            mcfg[k] = v
        with pytest.raises(RuntimeError) as err:
            task.build_model(mcfg).load_state_dict(state["model"], strict=True, model_cfg=mcfg)
        return str(err.value)

    pair = pretrained["glue"]["pair"]
    assert "pass --add-mask-symbol" in load("sipe_deberta", encoder_task(pair, add_mask_symbol=False))
    msg = load("sipe_roberta", encoder_task(pair, max_positions=512))  # the task sets the model's max_positions
    assert "size mismatch for encoder.embed_positions" in msg and f"pass --max-positions {TPS}" in msg
    msg = load("sipe_modernbert", encoder_task(pair), sipe_injection="none")
    assert "Unexpected key" in msg and "--model-flags" in msg


def test_model_flags_rebuild_each_encoder(pretrained):
    for name, (_, model) in ENCODERS.items():
        flags = model_flags(str(pretrained["ckpt"][name]))
        assert flags[0] == "--arch" and flags[1] == model[1]
        assert flags[flags.index("--max-positions") + 1] == str(TPS)
        assert flags[flags.index("--encoder-embed-dim") + 1] == "64"
        if name != "roberta":
            assert flags[flags.index("--sipe-injection") + 1] == model[3]


# ----------------------------------------------------------------------------- end to end


def test_finetune_end_to_end(pretrained):
    """fairseq-train with the RoBERTa recipe from each MLM checkpoint (in parallel): the body is the
    checkpoint's (only the head is new), the synthetic pair task is learned (its label word follows
    the separator), and ``sipe-eval glue`` recomputes the logged accuracy."""
    root, data = pretrained["root"], pretrained["glue"]["pair"]
    procs = {}
    for name in ENCODERS:
        ckpt = pretrained["ckpt"][name]
        body = model_flags(str(ckpt)) + (["--sipe-tag-heads", "off"] if name != "roberta" else [])
        cmd = [BIN / "fairseq-train", data, "--user-dir", PLUGIN, *RECIPE, *body, "--restore-file", ckpt,
               "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--optimizer", "adam",
               "--adam-betas", "(0.9,0.999)", "--adam-eps", "1e-6", "--weight-decay", "0.1", "--lr", "0.001",
               "--batch-size", "16", "--max-epoch", "6", "--seed", "1", "--save-dir", root / f"ft-{name}",
               "--no-epoch-checkpoints", "--num-workers", "0", "--log-format", "simple"]
        procs[name] = launcher.popen(cmd, cwd=root, env=ENV)
    # examples/glue/finetune.sh: encoder inputs, and the Table 11 row of the checkpoint's backbone
    script = [str(ROOT / "examples" / "glue" / "finetune.sh"), "rte", str(data), str(pretrained["ckpt"]["sipe_modernbert"]),
              str(root / "ft-script"), "--max-update", "2", "--batch-size", "16"]
    script_proc = subprocess.Popen(["bash", *script], cwd=root, env=dict(ENV, PYTHON=sys.executable),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    logs = {}
    for name, p in procs.items():
        out, _ = p.communicate(timeout=900)
        assert p.returncode == 0, f"{name}\n{out[-4000:]}"
        logs[name] = out
    out, _ = script_proc.communicate(timeout=900)
    assert script_proc.returncode == 0, out[-4000:]
    assert "sipe_modernbert_tiny (encoder) backbone=modernbert lr=5e-5 wd=1e-5" in out, out[:3000]  # Table 11, RTE
    cmd = next(line for line in out.splitlines() if "exec " in line and "fairseq-train" in line)
    for flags in ("--init-token 0 --separator-token 2 --add-mask-symbol --shorten-method truncate", "--sipe-injection position",
                  f"--max-positions {TPS}", "--lr 5e-5", "--weight-decay 1e-5", "--adam-eps 1e-6", "--max-epoch 20"):
        assert flags in cmd, (flags, cmd)
    assert "initialized fresh" in out and "valid on 'valid' subset" in out
    for name, log in logs.items():
        assert f"Loaded checkpoint {pretrained['ckpt'][name]}" in log, log[-3000:]
        if name == "roberta":  # fairseq's own upgrade logs each new head key
            new = re.findall(r"Overwriting (\S+)", log)
        else:
            new = ast.literal_eval(re.search(r"initialized fresh \(the new classification head\): (\[.*\])", log).group(1))
            assert "dropped the LM's terminal_head weights" in log  # --sipe-tag-heads off
        assert sorted(new) == sorted(HEAD + p for p in ("dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"))
        valid = re.findall(r"valid on 'valid' subset \|.* \| accuracy ([\d.]+) \|", log)
        assert len(valid) == 6, log[-3000:]
        ck = root / f"ft-{name}" / "checkpoint_last.pt"
        row = glue_eval.evaluate_glue(str(ck), str(data), "valid")
        assert row["n"] == 40 and abs(row["accuracy"] - float(valid[-1])) <= 0.051, (name, row, valid)
        assert row["accuracy"] >= 85, (name, row, valid)
        mlm, ft = (checkpoint_utils.load_checkpoint_to_cpu(str(p)) for p in (pretrained["ckpt"][name], ck))
        # the LM head is kept and, unused by the classifier, unchanged; the body was fine-tuned
        assert torch.equal(ft["model"]["encoder.lm_head.dense.weight"], mlm["model"]["encoder.lm_head.dense.weight"])
        emb = "encoder.sentence_encoder.embed_tokens.weight" if name == "roberta" else "encoder.embed_tokens.weight"
        assert not torch.equal(ft["model"][emb], mlm["model"][emb])
        if name != "roberta":  # the fine-tuned model has the MLM's injection
            mlm_cfg, ft_cfg = model_cfg(mlm), model_cfg(ft)
            assert ft_cfg.sipe_injection == mlm_cfg.sipe_injection != "none" and ft_cfg.sipe_tag_heads == "off"
    # a best metric computed by scikit-learn (MCC, F1, Pearson) is a numpy scalar in fairseq's checkpoint
    state = torch.load(str(root / "ft-sipe_deberta" / "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    state["extra_state"]["best"] = state["extra_state"]["val_loss"] = np.float64(55.5)
    torch.save(state, str(root / "numpy-best.pt"))
    assert glue_eval.evaluate_glue(str(root / "numpy-best.pt"), str(data), "valid")["n"] == 40
    out = run([sys.executable, "-m", "sipe_fairseq.cli.eval", "glue", "--data", data, "--path",
               root / "ft-roberta" / "checkpoint_last.pt"], root)  # fairseq's roberta: argparse checkpoint
    assert re.search(r"rte valid \(n=40\): accuracy [\d.]+", out), out

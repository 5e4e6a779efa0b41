"""``fairseq-hydra-train`` configs for the paper's rows (examples/*/config/): every config composes
with fairseq's schema, every key is a real field of the plugin's dataclasses, nothing required is
left out, each row has the paper's settings (tables written out here from the paper), and its model
builds at tiny size. A representative subset runs ``fairseq-hydra-train`` for 2 updates on toy data:
the MLM pre-training of ``table4_deberta_position`` (DeBERTa, in-place Eq. 13), then
``table11_deberta_rte`` fine-tuned from that checkpoint (task hexatag_sentence_prediction), and
(tests/test_mixed_precision.py) ``table2_position`` of the decoder in float32 and bfloat16.
"""
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fairseq import tasks
from fairseq.dataclass.initialize import add_defaults, hydra_init
from sipe_fairseq.cli.glue_preprocess import main as glue_main
import launcher
from conftest import ROOT
from test_glue import BIN, ENV, PLUGIN, RTE, write_task  # also registers the fake parser "glue-fake"

CONFIG = {"decoder": ROOT / "examples/txl_16l/config", "glue": ROOT / "examples/glue/config"}
ROWS = sorted((kind, p.stem) for kind, d in CONFIG.items() for p in d.glob("*.yaml") if not p.stem.startswith("_"))

# The paper's rows, from its tables (independent of the yaml files).
TABLE2 = {"none": ("none", None), "input": ("input", None), "position": ("position", None),
          "disentangled": ("disentangled", None),
          "attention_bias_shared": ("attention-bias", "shared"), "attention_bias_layer": ("attention-bias", "layer"),
          "input_attention_bias": ("input+attention-bias", None), "position_attention_bias": ("position+attention-bias", None)}
FIG3_K = (1, 2, 4, 6, 8, 10, 12, 14)  # section 5: k = 1 and k in {2, 4, ..., 14}
TABLE4 = {"roberta": ("none", "input"), "deberta": ("none", "input", "position"), "modernbert": ("none", "input", "position")}
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
TABLE11_MODERNBERT = {"cola": (8e-5, 1e-6), "sst2": (8e-5, 1e-5), "mrpc": (5e-5, 5e-6), "stsb": (8e-5, 5e-6),
                      "qqp": (5e-5, 5e-6), "mnli": (5e-5, 5e-6), "qnli": (8e-5, 5e-6), "rte": (5e-5, 1e-5)}
TINY = {"sipe_txl": ["model.decoder_embed_dim=16", "model.decoder_ffn_embed_dim=32", "model.decoder_attention_heads=2"],
        "sipe_roberta": [], "sipe_deberta": ["model.relative_buckets=8", "model.max_relative_positions=32"],
        "sipe_modernbert": ["model.local_attention_window=8"]}
TINY_ENCODER = ["model.encoder_embed_dim=16", "model.encoder_ffn_embed_dim=32", "model.encoder_layers=3",
                "model.encoder_attention_heads=2"]


def expected(kind, name):
    """The paper's settings of a row: {dotted key: value}."""
    table, _, rest = name.partition("_")
    if table == "table2":
        inj, sharing = TABLE2[rest]
        row = {"model._name": "sipe_txl", "model.sipe_injection": inj}
        return {**row, "model.sipe_projection_sharing": sharing} if sharing else row
    if table in ("table7", "table8"):
        sharing, target = rest.split("_", 1)
        return {"model.sipe_injection": "position" if table == "table7" else "disentangled",
                "model.sipe_projection_sharing": sharing, "model.sipe_projection_target": target}
    if table == "fig3":
        return {"model.sipe_injection": "position", "model.sipe_first_layer": int(rest[1:])}
    backbone, rest = rest.split("_", 1)
    if table == "table4":
        return {"task._name": "hexatag_mlm", "model._name": f"sipe_{backbone}", "model.sipe_injection": rest}
    assert table == "table11", name
    lr, wd = TABLE11_MODERNBERT[rest] if backbone == "modernbert" else (1e-5, 0.1)
    return {"task._name": "hexatag_sentence_prediction", "model._name": f"sipe_{backbone}", "optimization.lr": [lr],
            "optimizer.weight_decay": wd, "optimizer.adam_eps": 1e-6, "optimization.max_epoch": 20}


def test_every_paper_row_has_a_config():
    names = {name for _, name in ROWS}
    want = ({f"table2_{k}" for k in TABLE2}
            | {f"table{t}_{s}_{d}" for t in (7, 8) for s in ("shared", "layer") for d in ("d_head", "d_model")}
            | {f"fig3_k{k}" for k in FIG3_K} | {f"table4_{b}_{i}" for b, injs in TABLE4.items() for i in injs}
            | {f"table11_{b}_{t}" for b in TABLE4 for t in GLUE_TASKS})
    assert names == want, (sorted(names - want), sorted(want - names))


@pytest.fixture(scope="module")
def data(tmp_path_factory, toy_data):
    root = tmp_path_factory.mktemp("hydra")
    lm = toy_data
    glue = root / "glue-bin"
    assert glue_main(["--task-name", "rte", "--glue-dir", str(write_task(root / "glue", "RTE", RTE)), "--pretrain-data", str(lm),
                      "--destdir", str(glue), "--parser", "glue-fake"]) == 0
    return {"root": root, "lm": lm, "glue": glue}


def row_overrides(kind, name, data, ckpt="/nonexistent/checkpoint.pt"):
    """What a user passes on the command line (user dir, data, and the GLUE run lengths)."""
    out = [f"common.user_dir={PLUGIN}", "common.cpu=true", "dataset.num_workers=0"]
    if name.startswith("table11"):
        return out + [f"task.data={data['glue']}", "task.max_positions=64", f"checkpoint.finetune_from_model={ckpt}",
                      "optimization.max_update=2", "lr_scheduler.total_num_update=2", "lr_scheduler.warmup_updates=1"]
    if name.startswith("table4"):
        return out + [f"task.data={data['lm']}", "task.tokens_per_sample=64"]
    return out + [f"task.data={data['lm']}", "task.tokens_per_sample=64"]


def compose_row(kind, name, overrides):
    hydra_init(name)  # as fairseq-hydra-train: the schema under the config's name
    # version_base "1.1", as fairseq-hydra-train (its @hydra.main names none): hydra keeps the version
    # base process-wide, and a newer one makes fairseq's convert_namespace_to_omegaconf (which uses
    # hydra.experimental.initialize) raise in every later test of the same process.
    with initialize_config_dir(config_dir=str(CONFIG[kind]), version_base="1.1"):
        cfg = compose(name, overrides=overrides)
    add_defaults(cfg)  # plugin registered: merges the plugin's task/model/criterion dataclasses (unknown keys raise)
    return cfg


def tiny(cfg):
    name = cfg.model._name
    return TINY[name] + ([] if name == "sipe_txl" else TINY_ENCODER)


_tasks = {}


@pytest.mark.parametrize("kind,name", ROWS)
def test_config_composes_with_the_papers_settings_builds_and_trains(kind, name, data):
    base = OmegaConf.load(CONFIG[kind] / f"{name}.yaml").defaults  # the backbone decides the tiny sizes
    family = "sipe_txl" if kind == "decoder" else f"sipe_{name.split('_')[1]}"
    assert f"_{family[5:]}" in base or family == "sipe_txl"
    cfg = compose_row(kind, name, row_overrides(kind, name, data) + TINY[family] + ([] if family == "sipe_txl" else TINY_ENCODER))
    assert not OmegaConf.missing_keys(cfg), OmegaConf.missing_keys(cfg)
    for key, value in expected(kind, name).items():
        got = OmegaConf.select(cfg, key)
        got = list(got) if OmegaConf.is_list(got) else got
        assert got == value, (key, got, value)
    assert cfg.checkpoint.save_dir == f"checkpoints/{name}"
    if cfg.task._name not in _tasks:
        _tasks[cfg.task._name] = tasks.setup_task(cfg.task)
    model = _tasks[cfg.task._name].build_model(cfg.model)
    layers = model.decoder.layers if family == "sipe_txl" else model.encoder.layers
    assert len(layers) == (16 if family == "sipe_txl" else 3)  # the decoder keeps its 16 layers (Figure 3's k up to 14)
    injected = [i + 1 for i, layer in enumerate(layers) if len(layer.attn.injections)]
    parts = [p for p in str(cfg.model.sipe_injection).split("+") if p not in ("none", "input")]
    if parts:  # score-side injections from sipe_first_layer on (Figure 3's k)
        assert injected == list(range(cfg.model.get("sipe_first_layer", 1), len(layers) + 1))
    else:
        assert injected == []
    if family == "sipe_txl" and parts:
        sharing = cfg.model.get("sipe_projection_sharing", "auto")
        projections = {id(p) for layer in layers for inj in layer.attn.injections for p in inj.parameters()}
        per_layer = sum(1 for inj in layers[-1].attn.injections for _ in inj.parameters())
        assert len(projections) == (per_layer if sharing == "shared" else per_layer * len(injected))
    if not name.endswith("_stsb"):  # STS-B is a regression row; the toy GLUE directory holds RTE's labels
        two_updates(_tasks[cfg.task._name], cfg, model)


def two_updates(task, cfg, model):
    """Two updates of the row's own criterion on a toy batch, in-process (what fairseq-train's first two
    updates do, without the subprocess): the losses are finite and the parameters move."""
    criterion = task.build_criterion(cfg.criterion)
    if "valid" not in task.datasets:
        task.load_dataset("valid")
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=4, ignore_invalid_inputs=True, seed=1)
    sample = next(iter(itr.next_epoch_itr(shuffle=False)))
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(2):
        loss, sample_size, _ = criterion(model, sample)
        assert torch.isfinite(loss) and sample_size > 0
        (loss / sample_size).backward()
        opt.step()
        opt.zero_grad()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def hydra_train(kind, name, overrides, cwd):
    proc = launcher.run([BIN / "fairseq-hydra-train", "--config-dir", CONFIG[kind], "--config-name", name, *overrides],
                        cwd=cwd, env=ENV, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def test_hydra_train_mlm_then_glue(data, tmp_path):
    """table4_deberta_position pre-trains 2 updates; table11_deberta_rte fine-tunes that checkpoint."""
    ov = row_overrides("glue", "table4_deberta_position", data)
    mlm = compose_row("glue", "table4_deberta_position", ov)
    pre = tmp_path / "mlm"
    log = hydra_train("glue", "table4_deberta_position",
                      ov + tiny(mlm) + ["optimization.max_update=2", "optimization.update_freq=[1]", "dataset.batch_size=8",
                                        "lr_scheduler.warmup_updates=1", "lr_scheduler.total_num_update=2",
                                        f"checkpoint.save_dir={pre}",
                                        "common.log_interval=1"], tmp_path)
    assert "num_updates=2" in log and "SiPEDebertaModel" in log
    ckpt = pre / "checkpoint_last.pt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state["cfg"]["model"]["sipe_injection"] == "position" and state["cfg"]["model"]["encoder_embed_dim"] == 16
    glue_ov = row_overrides("glue", "table11_deberta_rte", data, ckpt) + tiny(mlm) + [
        "model.sipe_injection=position", f"checkpoint.save_dir={tmp_path / 'rte'}", "common.log_interval=1"]
    log = hydra_train("glue", "table11_deberta_rte", glue_ov, tmp_path)
    assert f"loading pretrained model from {ckpt}" in log
    assert "num_updates 2" in log and "valid on 'valid' subset" in log and "accuracy" in log

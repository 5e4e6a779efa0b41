"""gilt_transformer_lm (GiLT-GPT2 post-training, docs/gilt-reference.md section 6): --gilt-init-from a trained
transformer_lm / sipe_transformer_lm, identity at zero init, the graph key offsets against a naive
attention, incremental decoding, grouped_adam's per-group learning rates, the stage-2 loss, and a
two-stage fairseq-train run end to end."""
import math
import re
import shutil

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from fairseq import checkpoint_utils, metrics, optim, tasks  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.modules import MultiheadAttention  # noqa: E402
from fairseq.options import get_training_parser, parse_args_and_arch  # noqa: E402

from sipe_fairseq.checkpoints import CheckpointError  # noqa: E402
from sipe_fairseq.models.graph_key_attention import GraphKeyAttention  # noqa: E402
from sipe_fairseq.modules.graph_term import GraphContext, GraphFeatureTables, GraphFeatureTerm  # noqa: E402

import launcher
from conftest import BIN, ENV, LM_TASK, PLUGIN, STOCK_LM, run  # noqa: E402

BASES = {  # name -> fairseq-train arguments of a tiny base LM (trained once per session by conftest's cache)
    "transformer_lm": [*STOCK_LM, "--decoder-layers", "4"],  # layers 1-2 vanilla, 3-4 GiLT
    "sipe_transformer_lm": [*LM_TASK, "--arch", "sipe_transformer_lm_tiny"],  # 2 layers: 1 vanilla, 2 GiLT
}
GILT = ["--task", "gilt_lm", "--tokens-per-sample", "64", "--sample-break-mode", "complete"]


@pytest.fixture(scope="module")
def bases(train_checkpoint):
    return dict(zip(BASES, train_checkpoint.many(list(BASES.values()))))


def parse(data, *extra):
    args = parse_args_and_arch(get_training_parser(), [str(data), "--user-dir", PLUGIN, *GILT, "--criterion", "gilt_lm",
                                                       "--arch", "gilt_transformer_lm", *map(str, extra)])
    return convert_namespace_to_omegaconf(args)


def build(data, *extra):
    """(task, model in eval mode, cfg) as fairseq-train builds them."""
    cfg = parse(data, *extra)
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model).eval(), cfg


def load_base(path, data):
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})
    return models[0].eval()


def batch(task, n=4, split="valid"):
    task.load_dataset(split)
    ds = task.datasets[split]
    return ds.collater([ds[i] for i in range(n)])


def base_inputs(name, net):
    tags = {"src_terminals": net["src_terminals"], "src_nonterminals": net["src_nonterminals"]}
    return tags if name == "sipe_transformer_lm" else {}


def log_probs(model, net, **kw):
    out = model(net["src_tokens"], **kw)
    return model.get_normalized_probs(out, log_probs=True), out[1]


@pytest.mark.parametrize("name", list(BASES))
def test_identity_at_zero_init(bases, toy_data, name):
    """--gilt-proj-init zero: the LM log-probs are the base checkpoint's (float64, 1e-6), with real graphs."""
    task, gilt, _ = build(toy_data, "--gilt-init-from", bases[name], "--gilt-proj-init", "zero")
    base = load_base(bases[name], toy_data)
    net = batch(task)["net_input"]
    assert net["gilt_pairs"].any() and len(gilt.decoder.graph_attentions()) >= 1
    want, _ = log_probs(base.double(), net, **base_inputs(name, net))
    got, _ = log_probs(gilt.double(), net, **{k: v for k, v in net.items() if k != "src_tokens"})
    pad = net["src_tokens"].eq(task.dictionary.pad())
    assert (got - want)[~pad].abs().max().item() < 1e-6
    # the same model with the paper's init is not the base: the comparison above can fail
    task, gilt_tn, _ = build(toy_data, "--gilt-init-from", bases[name])
    moved, _ = log_probs(gilt_tn.double(), net, **{k: v for k, v in net.items() if k != "src_tokens"})
    assert (moved - want)[~pad].abs().max().item() > 1e-4


def test_lower_blocks_copied_upper_blocks_get_the_term(bases, toy_data, caplog):
    caplog.set_level("INFO")
    _, gilt, cfg = build(toy_data, "--gilt-init-from", bases["transformer_lm"])
    assert cfg.model.decoder_layers == 4 and cfg.model.decoder_embed_dim == 32  # the checkpoint's, not the preset's
    base = torch.load(str(bases["transformer_lm"]), map_location="cpu", weights_only=False)["model"]
    own = gilt.state_dict()
    for key, value in base.items():
        assert torch.equal(own[key], value), key
    kinds = [type(layer.self_attn) for layer in gilt.decoder.layers]
    assert kinds == [MultiheadAttention, MultiheadAttention, GraphKeyAttention, GraphKeyAttention]
    new = sorted(k for k in own if k not in base)
    assert [k for k in new if "graph_term" in k] == ["decoder.layers.2.self_attn.graph_term.proj",
                                                    "decoder.layers.3.self_attn.graph_term.proj"]
    assert all(k.startswith(("decoder.graph_tables.", "decoder.arc_scorer.")) or "graph_term" in k for k in new)
    log = caplog.text
    assert "new (initialized here): decoder.layers.{2-3}.self_attn.graph_term.proj, decoder.graph_tables.tables" in log
    assert re.search(r"copied \d+ tensors .*decoder\.layers\.\{0-3\}\.self_attn\.k_proj\.weight", log)
    assert "graph key offsets in layers 3..4" in log


def test_term_changes_outputs_from_the_first_layer_on(bases, toy_data):
    """With non-zero projections the embeddings and the outputs of layers 1..K-1 stay the base's, layer K's change;
    with layer K's projection zeroed, the change starts at layer K+1."""
    task, gilt, _ = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--gilt-proj-init-std", "0.5")
    base = load_base(bases["transformer_lm"], toy_data).double()
    gilt = gilt.double()
    net = batch(task)["net_input"]
    _, want = log_probs(base, net)
    inputs = {k: v for k, v in net.items() if k != "src_tokens"}

    def first_changed():
        _, got = log_probs(gilt, net, **inputs)
        diffs = [(a - b).abs().max().item() for a, b in zip(got["inner_states"], want["inner_states"])]
        return next(i for i, d in enumerate(diffs) if d > 1e-6), diffs

    layer, diffs = first_changed()
    assert layer == 3 and max(diffs[:3]) < 1e-9  # inner_states[i]: output of layer i (1-based)
    with torch.no_grad():
        gilt.decoder.layers[2].self_attn.graph_term.proj.zero_()
    layer, diffs = first_changed()
    assert layer == 4 and max(diffs[:4]) < 1e-9


def test_graph_key_offsets_against_naive_attention():
    """q_i . (k_j + d_ij) / sqrt(d_head), d_ij = P [e_deg; e_dep; e_dist] split over heads (no W_k), causal."""
    torch.manual_seed(0)
    b, t, c, h = 2, 6, 16, 2
    attn = GraphKeyAttention(c, h, self_attention=True).double().eval()
    tables = GraphFeatureTables().double()
    attn.graph_term = GraphFeatureTerm(tables, c, init_std=0.3).double()
    values = torch.randint(0, 151, (b, t, t, 3))
    x = torch.randn(t, b, c, dtype=torch.float64)
    mask = torch.full((t, t), float("-inf"), dtype=torch.float64).triu(1)
    attn.pairs = GraphContext.from_values(values)
    out, _ = attn(x, x, x, attn_mask=mask, need_weights=False)
    # naive: d_ij materialized (B, T, T, C) from the concatenated tables and a 768 -> C linear
    w = attn.graph_term.proj.detach().permute(1, 0, 2).reshape(c, -1)  # (C, 3 * 256)
    feats = torch.cat([tables.tables[f][values[..., f]] for f in range(3)], dim=-1)
    d = (feats @ w.t()).view(b, t, t, h, c // h)
    split = lambda y: y.view(t, b, h, c // h).permute(1, 2, 0, 3)  # noqa: E731  (B, H, T, dh)
    q, k, v = split(attn.q_proj(x)), split(attn.k_proj(x)), split(attn.v_proj(x))
    scores = torch.einsum("bhid,bhijd->bhij", q, k[:, :, None] + d.permute(0, 3, 1, 2, 4)) / math.sqrt(c // h)
    probs = torch.softmax(scores + mask, dim=-1)
    want = attn.out_proj((probs @ v).permute(2, 0, 1, 3).reshape(t, b, c))
    torch.testing.assert_close(out, want, rtol=0, atol=1e-10)
    attn.pairs = None  # without pairs: fairseq's attention, which differs
    plain, _ = attn(x, x, x, attn_mask=mask, need_weights=False)
    assert (plain - want).abs().max() > 1e-3


@pytest.mark.parametrize("name", list(BASES))
def test_incremental_decoding_equals_full_forward(bases, toy_data, name):
    task, gilt, _ = build(toy_data, "--gilt-init-from", bases[name], "--gilt-proj-init-std", "0.5")
    gilt = gilt.double()
    net = batch(task, n=2)["net_input"]
    inputs = {k: v for k, v in net.items() if k in ("src_words", "gilt_pairs", "src_terminals", "src_nonterminals")}
    full, _ = gilt(net["src_tokens"], **inputs)
    state, steps = {}, []
    for i in range(net["src_tokens"].size(1)):
        prefix = {k: v[:, : i + 1] if k != "gilt_pairs" else v for k, v in inputs.items()}
        step, _ = gilt(net["src_tokens"][:, : i + 1], incremental_state=state, **prefix)
        steps.append(step[:, -1])
    real = net["src_tokens"].ne(task.dictionary.pad())  # right padding: compare the real positions
    assert (~real).any() and (torch.stack(steps, 1) - full)[real].abs().max().item() < 1e-6  # fairseq's cached step
    # computes its softmax in float32 (fairseq.utils.softmax), so float64 agrees to ~1e-7, not 1e-15


def test_grouped_adam_learning_rates(bases, toy_data):
    """Stage 1: pre-trained weights at --lr, the new key projections (and tables) at 5x; each group's first Adam step
    moves its parameters by its own rate; a scheduler's rate keeps the ratio. The tables in group gilt is this
    plugin's old grouping (--gilt-tables-lr-group gilt; the authors': test_gilt_reference.py)."""
    _, gilt, cfg = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--optimizer", "grouped_adam",
                         "--lr", "3e-5", "--lr-scales", "gilt=5", "--gilt-tables-lr-group", "gilt")
    params = [p for p in gilt.parameters() if p.requires_grad]
    opt = optim.build_optimizer(cfg.optimizer, params)
    lrs = {g["group_name"]: g["lr"] for g in opt.param_groups}
    assert lrs == pytest.approx({"default": 3e-5, "gilt": 1.5e-4, "arc": 3e-5})
    names = {id(p): n for n, p in gilt.named_parameters()}
    by_group = {g["group_name"]: {names[id(p)] for p in g["params"]} for g in opt.param_groups}
    assert by_group["gilt"] == {"decoder.graph_tables.tables", "decoder.layers.2.self_attn.graph_term.proj",
                                "decoder.layers.3.self_attn.graph_term.proj"}
    assert all(n.startswith("decoder.arc_scorer.") for n in by_group["arc"])
    assert not any("graph" in n or "arc_scorer" in n for n in by_group["default"])
    before = {n: p.detach().clone() for n, p in gilt.named_parameters()}
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()  # Adam's first step moves every coordinate by lr (|m / sqrt(v)| = 1)
    step = {n: (p.detach() - before[n]).abs() for n, p in gilt.named_parameters()}
    assert step["decoder.layers.0.self_attn.k_proj.weight"].mean().item() == pytest.approx(3e-5, rel=1e-3)
    assert step["decoder.layers.3.self_attn.graph_term.proj"].mean().item() == pytest.approx(1.5e-4, rel=1e-3)
    opt.set_lr(1e-5)  # what a warm-up / decay scheduler does
    assert {g["group_name"]: g["lr"] for g in opt.param_groups} == pytest.approx(
        {"default": 1e-5, "gilt": 5e-5, "arc": 1e-5})
    assert opt.get_lr() == pytest.approx(1e-5)
    cfg.optimizer.lr_scales = "biaffine=5"
    with pytest.raises(ValueError, match="biaffine"):
        optim.build_optimizer(cfg.optimizer, params)


def test_stage2_loss_is_weighted_against_naive(bases, toy_data):
    """gilt_post: loss = 5/7 LM + 2/7 (arc BCE + count CE), summed; logged per token in bits."""
    task, gilt, cfg = build(toy_data, "--gilt-init-from", bases["transformer_lm"])
    crit = task.build_criterion(parse(toy_data, "--criterion", "gilt_post").criterion)
    sample = batch(task)
    with torch.no_grad():
        loss, ntokens, log = crit(gilt, sample)
        out = gilt(**sample["net_input"])
    # naive: LM over non-pad targets; BCE and count CE from the scorer's logits, pair by pair
    lp = F.log_softmax(out[0].double(), -1)
    tgt = sample["target"]
    lm = -sum(lp[b, i, tgt[b, i]].item() for b in range(tgt.size(0)) for i in range(tgt.size(1))
              if tgt[b, i] != task.dictionary.pad())
    arcs = out[1]["arcs"]
    bce, ce = 0.0, 0.0
    for logits, mask, gold in ((arcs["head_logits"], arcs["head_mask"], sample["gilt_head"]),
                               (arcs["dep_logits"], arcs["dep_mask"], sample["gilt_dep"])):
        for idx in mask.nonzero().tolist():
            x, y = logits[tuple(idx)].item(), float(gold[tuple(idx)])
            p = 1 / (1 + math.exp(-x))
            bce -= y * math.log(p) + (1 - y) * math.log(1 - p)
    for b, w in arcs["word_mask"].nonzero().tolist():
        n_gold = int((sample["gilt_head"][b, w].bool() & arcs["head_mask"][b, w]).sum()
                     + (sample["gilt_dep"][b, w].bool() & arcs["dep_mask"][b, w]).sum())
        ce -= F.log_softmax(arcs["count_logits"][b, w].double(), -1)[min(n_gold, 29)].item()
    want = 5 / 7 * lm + 2 / 7 * (bce + ce)
    assert bce > 0 and ce > 0
    assert loss.item() == pytest.approx(want, rel=1e-5)
    assert log["lm_loss"].item() == pytest.approx(lm, rel=1e-5)
    with metrics.aggregate() as agg:
        crit.reduce_metrics([log])
        logged = agg.get_smoothed_values()
    assert logged["loss"] == pytest.approx(want / ntokens / math.log(2), abs=2e-3)  # rounded to 3 decimals
    # stage 1 (gilt_lm --lm-only): the LM term alone, the arc scorer not run (no gradient reaches it)
    lm_only = task.build_criterion(parse(toy_data, "--criterion", "gilt_lm", "--lm-only").criterion)
    gilt.train()
    loss1, _, log1 = lm_only(gilt, sample)
    loss1.backward()
    assert "arc_loss" not in log1 and loss1.item() == pytest.approx(log1["lm_loss"].item())
    assert all(p.grad is None for p in gilt.decoder.arc_scorer.parameters())
    assert gilt.decoder.layers[3].self_attn.graph_term.proj.grad.abs().sum() > 0


def test_bad_init_checkpoints(bases, toy_data, tmp_path):
    """A missing file, another model family, another vocabulary: one line, no traceback (fairseq-train: exit 3, a
    checkpoint that cannot be used, as in the sipe-* commands)."""
    state = torch.load(str(bases["transformer_lm"]), map_location="cpu", weights_only=False)
    state["model"]["decoder.embed_tokens.weight"] = state["model"]["decoder.embed_tokens.weight"][:-3]
    torch.save(state, tmp_path / "vocab.pt")
    with pytest.raises(CheckpointError, match=r"token embedding has \d+ rows, the task's dictionary \d+ types"):
        build(toy_data, "--gilt-init-from", tmp_path / "vocab.pt")
    state["cfg"]["model"]["_name"] = state["cfg"]["model"]["arch"] = "sipe_txl_tiny"
    torch.save(state, tmp_path / "family.pt")
    with pytest.raises(CheckpointError, match="a sipe_txl checkpoint .*expected one of transformer_lm"):
        build(toy_data, "--gilt-init-from", tmp_path / "family.pt")
    proc = launcher.run([BIN / "fairseq-train", toy_data, "--user-dir", PLUGIN, *GILT, "--criterion", "gilt_lm",
                         "--arch", "gilt_transformer_lm", "--gilt-init-from", tmp_path / "missing.pt",
                         "--save-dir", tmp_path / "ck", "--max-update", "1", "--max-tokens", "1024", "--num-workers", "0"],
                        env=ENV, timeout=300)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert f"sipe_fairseq: error: checkpoint {tmp_path / 'missing.pt'}: no such file" in proc.stderr.splitlines()


def test_two_stage_post_training_end_to_end(bases, toy_data, tmp_path):
    """base transformer_lm -> stage 1 (LM only, new projections at 5x) -> stage 2 (gilt_post, arc scorer at 5x)
    -> fairseq-eval-lm of stage 2 with stage 1 and the base moved away (nothing re-read)."""
    common = ["--optimizer", "grouped_adam", "--lr", "0.001", "--max-tokens", "1024", "--max-update", "3", "--seed", "1",
              "--no-epoch-checkpoints", "--no-last-checkpoints", "--num-workers", "0", "--log-format", "simple"]
    base = tmp_path / "base.pt"
    shutil.copy(bases["transformer_lm"], base)
    train = [BIN / "fairseq-train", toy_data, "--user-dir", PLUGIN, *GILT, "--arch", "gilt_transformer_lm", *common]
    log1 = run([*train, "--criterion", "gilt_lm", "--lm-only", "--lr-scales", "gilt=5", "--gilt-init-from", base,
                "--save-dir", tmp_path / "s1"], cwd=tmp_path)
    assert re.search(r"gilt: [\d,]+ parameters at 5 x lr; arc: [\d,]+ parameters at 1 x lr", log1)
    assert "arc_loss" not in log1
    log2 = run([*train, "--criterion", "gilt_post", "--lr-scales", "gilt=5,arc=5", "--gilt-init-from",
                tmp_path / "s1/checkpoint_best.pt", "--save-dir", tmp_path / "s2"], cwd=tmp_path)
    assert "new (initialized here): (none)" in log2 and re.search(r"arc: [\d,]+ parameters at 5 x lr", log2)
    valid = re.findall(r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+).*?arc_loss ([\d.]+)", log2)
    assert valid and float(valid[-1][0]) != pytest.approx(float(valid[-1][1]), abs=1e-3)
    base.unlink()
    shutil.move(tmp_path / "s1", tmp_path / "s1-moved")
    out = run([BIN / "fairseq-eval-lm", toy_data, "--user-dir", PLUGIN, *GILT, "--path", tmp_path / "s2/checkpoint_best.pt",
               "--gen-subset", "valid", "--max-tokens", "1024", "--num-workers", "0"], cwd=tmp_path)
    bits = float(re.search(r"Loss \(base 2\): ([\d.]+)", out).group(1))
    assert bits == pytest.approx(float(valid[-1][1]), abs=0.01)


@torch.no_grad()
def test_structure_sources_score_a_post_trained_model(bases, toy_data):
    """The beam over graphs (``sipe-eval-lm --tags``, BLiMP, SyntaxGym) on ``gilt_transformer_lm``: fairseq's
    decoder takes one new token per cached call and its o_w embedding carries the position's embedding.
    ``self`` equals an independent greedy loop of full forwards (test_gilt_eval.greedy_loop), ``given``
    one full forward on the gold graph, ``beam:1`` with one count pays the counts on top of ``self``."""
    from test_gilt_eval import greedy_loop, per_token

    from test_gilt_eval import read_sentences

    from sipe_fairseq.eval import prefix_scores
    from sipe_fairseq.structure.family import StructureOptions, is_gilt

    task, model, _ = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--gilt-proj-init-std", "0.5")
    model = model.double()
    assert is_gilt(model) and prefix_scores.default_sources(model) == ["self"]
    n = 6
    res = prefix_scores.score_split_sources(model, task, "valid", ["given", "self", "beam:1"],
                                            StructureOptions(count_beam=1, max_sentences=n))
    sentences = read_sentences(task, "valid")[:n]
    lm, counts, cond = 0.0, 0.0, 0.0
    for words, gold in sentences:
        _, token_lp, count_lp = greedy_loop(model, words)
        lm, counts, cond = lm - sum(token_lp), counts - count_lp, cond - sum(per_token(model, words, gold))
    assert res["self"]["sentences"] == n
    assert res["self"]["nll"] == pytest.approx(lm, rel=1e-7)
    assert res["beam:1"]["nll"] == pytest.approx(lm + counts, rel=1e-7) and counts > 1.0
    assert res["given"]["nll"] == pytest.approx(cond, rel=1e-7)
    assert abs(res["given"]["nll"] - res["self"]["nll"]) > 1e-3  # the graph matters


@torch.no_grad()
def test_unbounded_beam_equals_enumeration(bases, toy_data):
    """The beam over graphs reorders fairseq's cache (reorder_incremental_state_scripting): with unbounded width
    it equals the exact enumeration of every count sequence (test_gilt_scoring.check_beam_equals_enumeration)."""
    from test_gilt_scoring import check_beam_equals_enumeration

    _, model, _ = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--gilt-proj-init-std", "0.5")
    check_beam_equals_enumeration(model.double(), atol=1e-6)  # fairseq's cached softmax is float32 (see above)


def test_hexatag_input_model_is_refused_by_structure_sources(bases, toy_data):
    from sipe_fairseq.eval import prefix_scores
    from sipe_fairseq.structure.family import StructureOptions

    task, model, _ = build(toy_data, "--gilt-init-from", bases["sipe_transformer_lm"])
    with pytest.raises(ValueError, match="reads hexatags as input"):  # before any forward
        prefix_scores.score_split_sources(model, task, "valid", ["self"], StructureOptions(max_sentences=1))


def test_generation_with_a_post_trained_model(bases, toy_data):
    """fairseq's generator with the arc-choosing wrapper on ``gilt_transformer_lm`` (one token per cached call,
    positions in o_w): every hypothesis scores as a full forward with its own arcs as the gold graph, and its
    arcs are that forward's argmax count and top arcs (test_gilt_generate.check_hypothesis)."""
    from test_gilt_generate import check_hypothesis, generate

    task, model, _ = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--gilt-proj-init-std", "0.5")
    model = model.double()
    hyps, _ = generate(model, task.dictionary, bsz=3, beam=2, sampling=True, seed=2, max_len=12)
    flat = [h for beam in hyps for h in beam]
    assert len(flat) == 6
    for h in flat:
        check_hypothesis(model, task.dictionary, h)
    assert sum(len(h["arcs"]) for h in flat) >= 6

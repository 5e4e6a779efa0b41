"""GiLT as the authors' code builds it (cookie-pie-oops/GiLT-LM, src/; docs/gilt-reference.md): the distance of a
pair with arcs both ways, the arc scorer's input (no state before position 0; GiLT-GPT2's order), the feature
tables' init, Transformer-XL's shared u and v, the unscaled embedding, and the post-training parameter groups."""
import random

import numpy as np
import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.data.gilt.gilt_dataset import block_graph  # noqa: E402
from sipe_fairseq.data.gilt.graph_features import HEAD_TO_DEP, DEP_TO_HEAD, MAX_VALUE, GraphTape, sentence_tape  # noqa: E402
from sipe_fairseq.modules.arc_scorer import word_inputs  # noqa: E402

TWO_WORDS = [([0], []), ([1], [1])]  # root -> 1, 1 -> 2 and 2 -> 1: arcs both ways between words 1 and 2


# --- distance of two words with arcs both ways -------------------------------------------------------------------

def test_two_way_pair_later_head_by_default():
    """The authors' adjacency matrix: word 2's arc to its head 1 is written (1->2: 10, 2->1: 1), then its arc to
    its dependent 1 overwrites both entries (2->1: 10, 1->2: 1). From 2: to 1 costs 10, to the root 10 + 1."""
    row = sentence_tape(TWO_WORDS)[-1]
    assert row[:, 2].tolist() == [11, 10, 0]
    cheaper = sentence_tape(TWO_WORDS, two_way="cheaper")[-1]
    assert cheaper[:, 2].tolist() == [2, 1, 0]
    assert row[:, :2].tolist() == cheaper[:, :2].tolist()  # degree and depth count both arcs under either rule
    # from the earlier word's side (a third word reaching 1 and 2 through 1): 1 -> 2 costs 1 under both rules
    three = TWO_WORDS + [([1], [])]
    assert sentence_tape(three)[-1][:, 2].tolist() == [2, 1, 2, 0]
    with pytest.raises(ValueError, match="two-way distance rule"):
        GraphTape(two_way="min")


def _authors_distances(words):
    """Distance rows built the authors' way: one adjacency matrix over the sentence, filled word by word (the arcs
    to heads, then the arcs to dependents, each writing both directions), then shortest paths from the newest word
    over nodes 0..w (Floyd-Warshall here; 0 = no edge), unreachable and self 0."""
    n = len(words)
    adj = np.zeros((n + 1, n + 1))
    for w, (heads, deps) in enumerate(words, 1):
        for h in heads:
            adj[h, w], adj[w, h] = HEAD_TO_DEP, DEP_TO_HEAD
        for d in deps:
            adj[w, d], adj[d, w] = HEAD_TO_DEP, DEP_TO_HEAD
    rows = []
    for w in range(1, n + 1):
        dist = np.where(adj[: w + 1, : w + 1] > 0, adj[: w + 1, : w + 1], np.inf)
        np.fill_diagonal(dist, 0)
        for k in range(w + 1):
            dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
        d = dist[w]
        rows.append(np.clip(np.where(np.isfinite(d), d, 0), 0, MAX_VALUE).astype(int).tolist() + [0] * (n - w))
    return rows


def test_distance_equals_the_authors_matrix_on_random_graphs():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        words = []
        for w in range(1, n + 1):
            heads = sorted(rng.sample(range(w), rng.randint(0, min(2, w))))
            deps = sorted(rng.sample(range(1, w), rng.randint(0, min(2, w - 1)))) if w > 1 else []
            words.append((heads, deps))
        assert sentence_tape(words)[:, :, 2].tolist() == _authors_distances(words), words


def test_block_graph_and_dataset_take_the_rule():
    default, cheaper = block_graph([TWO_WORDS]), block_graph([TWO_WORDS], "cheaper")
    assert default["gilt_pairs"][2, 1].tolist() == [12, 2, 10] and cheaper["gilt_pairs"][2, 1].tolist() == [12, 2, 1]
    assert np.array_equal(default["gilt_prev"], cheaper["gilt_prev"])  # before word 2's arcs: no two-way pair yet


# --- the arc scorer's input ----------------------------------------------------------------------------------------

def _states(b=1, t=5, d=2, layers=4):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, t, d, generator=g) for _ in range(layers + 1)]


def test_word_inputs_refuses_a_word_at_position_0():
    """A word whose first subword is input position 0 has no state before it: (word_pos - 1).clamp(min=0) read
    position 0, which has seen the word itself. Now an error; index 0 and padding (sent -1) stay allowed."""
    inner = _states()
    sent = torch.tensor([[-1, 0, 0]])
    with pytest.raises(ValueError, match="input position 0"):
        word_inputs(inner, inner[0], torch.tensor([[0, 0, 2]]), sent)
    o = word_inputs(inner, inner[0], torch.tensor([[0, 1, 3]]), sent)
    assert not o[0, 0].any()
    torch.testing.assert_close(o[0, 2], torch.cat([inner[3][0, 2], inner[3][0, 2], inner[0][0, 3]]), rtol=0, atol=0)


def test_word_inputs_order():
    """[h^(L/2+1); h^(L-1); emb] (gilt_txl: the authors' cat([hiddens[L//2+1], hiddens[L-1]])) or, lower_first,
    [h^(L-1); h^(L/2+1); emb] (GiLT-GPT2: cat([hidden_states[-2], hidden_states[13]]))."""
    inner = _states(layers=6)  # L = 6: layers 4 and 5
    pos, sent = torch.tensor([[0, 2]]), torch.tensor([[-1, 0]])
    o = word_inputs(inner, inner[0], pos, sent)[0, 1]
    assert torch.equal(o, torch.cat([inner[4][0, 1], inner[5][0, 1], inner[0][0, 2]]))
    o = word_inputs(inner, inner[0], pos, sent, lower_first=True)[0, 1]
    assert torch.equal(o, torch.cat([inner[5][0, 1], inner[4][0, 1], inner[0][0, 2]]))


# --- gilt_txl: tables, u and v, embedding scale ---------------------------------------------------------------------

def _gilt_txl(seed=0, **kw):
    from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
    from conftest import small_dictionary

    cfg = GiltConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4,
                     dropout=0.0, tokens_per_sample=64, max_target_positions=64, **kw)
    torch.manual_seed(seed)
    return GiltDecoder(cfg, small_dictionary(40)).eval()


def _std_ok(t: torch.Tensor, std: float):
    """Sample std of n N(0, std^2) draws: relative error about 1/sqrt(2n) (n = 115,968 for the tables: 0.2%)."""
    return abs(t.detach().double().std().item() / std - 1) < 5 / (2 * t.numel()) ** 0.5  # 5 sigma


def test_gilt_txl_table_init():
    """The authors' tables are nn.Embedding(151, 256): N(0, 1), the attention term's and the arc scorer's."""
    dec = _gilt_txl()
    assert _std_ok(dec.graph_tables.tables, 1.0) and _std_ok(dec.arc_scorer.tables, 1.0)
    old = _gilt_txl(gilt_table_init_std=0.0625, gilt_arc_table_init_std=0.0625)  # this plugin before
    assert _std_ok(old.graph_tables.tables, 0.0625) and _std_ok(old.arc_scorer.tables, 0.0625)


def test_gilt_txl_shares_u_and_v():
    """TransformerGrammar passes one r_w_bias (u) and one r_r_bias (v) to every layer."""
    dec = _gilt_txl()
    attns = [layer.attn for layer in dec.layers]
    assert all(a.u_bias is attns[0].u_bias and a.relative.v_bias is attns[0].relative.v_bias for a in attns)
    n_layer = sum(p.numel() for p in _gilt_txl(gilt_txl_biases="layer").parameters())
    assert n_layer - sum(p.numel() for p in dec.parameters()) == 2 * 2 * attns[0].u_bias.numel()  # 2 of 3 layers' u, v
    per_layer = [layer.attn for layer in _gilt_txl(gilt_txl_biases="layer").layers]
    assert per_layer[0].u_bias is not per_layer[1].u_bias


def test_per_layer_biases_refused_by_a_shared_model():
    """A checkpoint with per-layer u (or v) loaded into a shared model would keep one layer's values: an error."""
    from sipe_fairseq.models.gilt_lm import GiltLanguageModel

    state = GiltLanguageModel(_gilt_txl(gilt_txl_biases="layer")).state_dict()
    shared = GiltLanguageModel(_gilt_txl(seed=1))
    with pytest.raises(ValueError, match="--gilt-txl-biases layer"):
        shared.load_state_dict(state)
    same = GiltLanguageModel(_gilt_txl(seed=2)).state_dict()  # written by a shared model: loads
    shared.load_state_dict(same)
    assert torch.equal(shared.decoder.layers[2].attn.u_bias, same["decoder.layers.0.attn.u_bias"])


def test_gilt_txl_embedding_unscaled():
    """TransformerGrammar: word_emb = self.emb(inputs) into the first layer and o_w (emb_scale unused)."""
    from sipe_fairseq.data.gilt.gilt_dataset import position_words
    from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID

    for scale, factor in (("none", 1.0), ("sqrt_d", 32 ** 0.5)):
        dec = _gilt_txl(gilt_embed_scale=scale)
        toks = torch.tensor([2, 7, 8, 9, 10])
        terms = torch.tensor([FIRST_TAG_ID - 1, FIRST_TAG_ID, FIRST_TAG_ID - 1, FIRST_TAG_ID, FIRST_TAG_ID])
        words, first = position_words(toks, terms, 2, 0)
        graph = {k: torch.from_numpy(v)[None] for k, v in block_graph([[([0], []), ([1], []), ([2], [])]]).items()}
        _, extra = dec(toks[None], src_words=words[None], gilt_word_pos=torch.cat([first.new_zeros(1), first])[None],
                       **{k: graph[k] for k in ("gilt_pairs", "gilt_prev", "gilt_local", "gilt_sent")})
        want = dec.embed_tokens(toks[None]) * factor
        torch.testing.assert_close(extra["inner_states"][0], want, rtol=0, atol=0)
        torch.testing.assert_close(dec.arc_embedding(toks[None]), want[:, -1], rtol=0, atol=0)


# --- gilt_transformer_lm (GiLT-GPT2): learning-rate groups of the two stages, tables, the scorer's input order ------

from test_gilt_post import BASES, batch, build  # noqa: E402


@pytest.fixture(scope="module")
def bases(train_checkpoint):
    return dict(zip(BASES, train_checkpoint.many(list(BASES.values()))))


def _rates(gilt, cfg):
    """{parameter name: its learning rate} under the configured grouped_adam."""
    from fairseq import optim

    params = [p for p in gilt.parameters() if p.requires_grad]
    opt = optim.build_optimizer(cfg.optimizer, params)
    names = {id(p): n for n, p in gilt.named_parameters()}
    return {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}


def test_stage1_rates_are_the_authors(bases, toy_data):
    """gpt2_posttraining.py, stage 1: the (1024, 768) weights (the key projections) at 1.5e-4, every other GPT-2
    parameter, the shared tables included, at 3e-5."""
    _, gilt, cfg = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--optimizer", "grouped_adam",
                         "--lr", "3e-5", "--lr-scales", "gilt=5")
    rates = _rates(gilt, cfg)
    fast = {n for n, r in rates.items() if r == pytest.approx(1.5e-4)}
    assert fast == {"decoder.layers.2.self_attn.graph_term.proj", "decoder.layers.3.self_attn.graph_term.proj"}
    assert all(r == pytest.approx(3e-5) for n, r in rates.items() if n not in fast)
    assert "decoder.graph_tables.tables" in rates


def test_stage2_rates_are_the_authors(bases, toy_data):
    """Stage 2 (run.sh: --lr-scales gilt=1,arc=5): the arc scorer at 1.5e-4 (biaffine_optimizer), everything else
    at 3e-5, the key projections and tables included (optimizer over model.parameters())."""
    _, gilt, cfg = build(toy_data, "--gilt-init-from", bases["transformer_lm"], "--optimizer", "grouped_adam",
                         "--lr", "3e-5", "--lr-scales", "gilt=1,arc=5")
    rates = _rates(gilt, cfg)
    fast = {n for n, r in rates.items() if r == pytest.approx(1.5e-4)}
    assert fast == {n for n in rates if n.startswith("decoder.arc_scorer.")} and fast
    assert all(r == pytest.approx(3e-5) for n, r in rates.items() if n not in fast)
    text = (__import__("pathlib").Path(__file__).parents[1] / "examples/gilt_post/run.sh").read_text()
    assert 'STAGE2_GILT_SCALE=${STAGE2_GILT_SCALE:-1}' in text and '--lr-scales "gilt=$STAGE2_GILT_SCALE,arc=$LR_SCALE"' in text


def test_gpt2_tables_init(bases, toy_data):
    """GiLT-GPT2's rel_embed: GPT-2's _init_weights, N(0, 0.02); the arc scorer's: N(0, 1)."""
    _, gilt, _ = build(toy_data, "--gilt-init-from", bases["transformer_lm"])
    assert _std_ok(gilt.decoder.graph_tables.tables, 0.02) and _std_ok(gilt.decoder.arc_scorer.tables, 1.0)


@torch.no_grad()
def test_gpt2_scorer_input_order(toy_data):
    """o_w = [h^(L-1)_(k-1); h^(L/2+1)_(k-1); wte+wpe of x_k] (cat([hidden_states[-2], hidden_states[13]]) and
    hidden_states[0]), in training and in the structure engine's arc_states. 6 layers: L-1 = 5, L/2+1 = 4."""
    task, gilt, _ = build(toy_data, "--decoder-layers", "6", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
                          "--decoder-attention-heads", "4")
    net = batch(task, n=2)["net_input"]
    dec, seen = gilt.decoder, {}
    real = dec.arc_scorer.forward

    def spy(o, *args):
        seen["o"] = o
        return real(o, *args)

    dec.arc_scorer.forward = spy
    try:
        _, extra = gilt(**net)
    finally:
        del dec.arc_scorer.forward
    inner = [h.transpose(0, 1) for h in extra["inner_states"]]
    d, b, w = dec.embed_dim, 0, 2
    k = int(net["gilt_word_pos"][b, w])
    o = seen["o"][b, w]
    torch.testing.assert_close(o[:d], inner[5][b, k - 1], rtol=0, atol=0)
    torch.testing.assert_close(o[d:2 * d], inner[4][b, k - 1], rtol=0, atol=0)
    torch.testing.assert_close(o[2 * d:], inner[0][b, k], rtol=0, atol=0)
    states = dec.arc_states({"inner_states": [torch.full((1, 1, d), float(i)) for i in range(7)]})
    assert states[0, :, 0].tolist() == [5.0, 4.0]


def test_two_way_rule_reaches_the_dataset_and_the_engine(toy_data):
    """--gilt-two-way-distance is a task option: the dataset's graphs and (through the model the task builds) the
    structure engine's graphs use it."""
    from sipe_fairseq.structure.family import policy_for

    for extra, want in (((), "later-head"), (("--gilt-two-way-distance", "cheaper"), "cheaper")):
        task, gilt, _ = build(toy_data, "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim",
                              "64", "--decoder-attention-heads", "4", *extra)
        batch(task, n=1)
        assert task.datasets["valid"].two_way == want and gilt.decoder.two_way_distance == want
        policy = policy_for(gilt)
        policy.begin(1, 4, 3)
        assert policy.two_way == want and policy.tapes[0].two_way == want


# --- checkpoints written before the authors' defaults load as they were trained ------------------------------------

def _strip(path, tmp_path, keys):
    """A copy of a checkpoint whose saved model configuration lacks ``keys`` (as one written before they existed)."""
    state = torch.load(str(path), map_location="cpu", weights_only=False)
    for key in keys:
        del state["cfg"]["model"][key]
    out = tmp_path / f"old-{path.parent.name}.pt"
    torch.save(state, out)
    return out


@torch.no_grad()
def _outputs(path, toy_data):
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(toy_data)})
    model = models[0].eval()
    return model, model(**batch(task, n=2)["net_input"])[0]


def test_old_gilt_txl_checkpoint_loads_as_trained(train_checkpoint, toy_data, tmp_path):
    from test_gilt_generate import GILT_TRAIN

    path = train_checkpoint([*GILT_TRAIN, "--gilt-txl-biases", "layer", "--gilt-embed-scale", "sqrt_d"])
    new, want = _outputs(path, toy_data)
    old, got = _outputs(_strip(path, tmp_path, ["gilt_txl_biases", "gilt_embed_scale", "gilt_table_init_std",
                                                "gilt_arc_table_init_std"]), toy_data)
    assert old.decoder.embed_scale == new.decoder.embed_scale == old.decoder.cfg.decoder_embed_dim ** 0.5
    assert not old.decoder.shared_biases and old.decoder.layers[0].attn.u_bias is not old.decoder.layers[1].attn.u_bias
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # the same model, the same float32 operations


def test_old_gilt_transformer_lm_checkpoint_loads_as_trained(bases, toy_data, tmp_path, train_checkpoint):
    from test_gilt_post import GILT

    path = train_checkpoint([*GILT, "--criterion", "gilt_lm", "--arch", "gilt_transformer_lm", "--gilt-init-from",
                             str(bases["transformer_lm"]), "--gilt-arc-input-order", "upper_first"])
    new, _ = _outputs(path, toy_data)
    old, _ = _outputs(_strip(path, tmp_path, ["gilt_arc_input_order", "gilt_tables_lr_group", "gilt_table_init_std",
                                              "gilt_arc_table_init_std"]), toy_data)
    assert not new.decoder.arc_lower_first and not old.decoder.arc_lower_first
    (tmp_path / "newer").mkdir()  # written after the order changed but before its option: today's order
    newer, _ = _outputs(_strip(path, tmp_path / "newer", ["gilt_arc_input_order"]), toy_data)
    assert newer.decoder.arc_lower_first

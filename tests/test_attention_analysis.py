"""Appendix C's attention analysis (issue 11, item 5): per-layer maps averaged over layers and heads
against an independent layer-by-layer forward; the arc mass on a hand-made 3-word example; the
corpus analysis end to end on a decoder and an encoder; the PNG."""
from collections import OrderedDict

import pytest
import torch
from fairseq.data import Dictionary

import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.data.encode import SentenceEncoder  # noqa: E402
from sipe_fairseq.eval import attention as A  # noqa: E402
from sipe_fairseq.hexatag.conllu_io import read_conllu  # noqa: E402
from sipe_fairseq.models.sipe_encoder import SiPEDebertaConfig, SiPEDebertaModel, SiPEEncoder  # noqa: E402
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel  # noqa: E402
from sipe_fairseq.modules.assembly import tag_context  # noqa: E402
from sipe_fairseq.modules.tag_embedding import tag_pair_classes  # noqa: E402

WORDS = ["she", "watches", "funny", "videos", "and", "reads", "books", "."]
CONLLU = """# text = she watches funny videos
1\tshe\t_\t_\t_\t_\t2\tnsubj\t_\t_
2\twatches\t_\t_\t_\t_\t0\troot\t_\t_
3\tfunny\t_\t_\t_\t_\t4\tamod\t_\t_
4\tvideos\t_\t_\t_\t_\t2\tobj\t_\t_

# text = books she reads .
1\tbooks\t_\t_\t_\t_\t3\tobj\t_\t_
2\tshe\t_\t_\t_\t_\t3\tnsubj\t_\t_
3\treads\t_\t_\t_\t_\t0\troot\t_\t_
4\t.\t_\t_\t_\t_\t3\tpunct\t_\t_

# text = she reads .
1\tshe\t_\t_\t_\t_\t2\tnsubj\t_\t_
2\treads\t_\t_\t_\t_\t0\troot\t_\t_
3\t.\t_\t_\t_\t_\t2\tpunct\t_\t_
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = Dictionary()
    for w in WORDS:
        d.add_symbol(w)
    path = tmp_path_factory.mktemp("data")
    d.save(str(path / "dict.txt"))
    (path / "corpus.conllu").write_text(CONLLU, encoding="utf-8")
    return path


def decoder_model(dictionary, injection="position", seed=0):
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, tokens_per_sample=64, max_target_positions=64,
                            sipe_proj_init_std=0.1)
    torch.manual_seed(seed)
    return SiPETransformerXLModel(SiPEDecoder(cfg, dictionary)).eval()


def encoder_model(dictionary, injection="position", seed=0):
    cfg = SiPEDebertaConfig(relative_buckets=8, max_relative_positions=32, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                            encoder_layers=3, encoder_attention_heads=4, max_positions=64, dropout=0.0,
                            attention_dropout=0.0, sipe_injection=injection, sipe_proj_init_std=0.1)
    torch.manual_seed(seed)
    return SiPEDebertaModel(SiPEEncoder(cfg, dictionary)).eval()


def tagged_batch(dictionary, t=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (2, t), generator=g)
    terms = torch.randint(4, 7, (2, t), generator=g)
    nts = torch.randint(5, 10, (2, t), generator=g)
    nts[terms == 4] = 4
    return tokens, terms, nts


def manual_average(maps, layers):
    """Sum over the chosen layers and heads, element by element, divided by their number."""
    total, n = torch.zeros_like(maps[0][:, 0]), 0
    for i in layers:
        for h in range(maps[i].size(1)):
            total += maps[i][:, h]
            n += 1
    return total / n


@pytest.mark.parametrize("kind", ["decoder", "encoder"])
def test_averaged_map_equals_independent_layer_by_layer_forward(data_dir, kind):
    d = Dictionary.load(str(data_dir / "dict.txt"))
    model = decoder_model(d) if kind == "decoder" else encoder_model(d)
    tokens, terms, nts = tagged_batch(d)
    with torch.no_grad():
        _, extra = model(tokens, src_terminals=terms, src_nonterminals=nts, need_attn=True)
        # independent forward: the embedding, then each layer's attention and block called by hand
        net = model.decoder if kind == "decoder" else model.encoder
        ctx = tag_context(tag_pair_classes(terms, nts), net.tags, net.pathway_tags)
        if kind == "decoder":
            x, kw = net.embed_tokens(tokens) * net.embed_scale, {"causal": True}
        else:
            x, kw = net.emb_norm(net.embed_tokens(tokens)), {"causal": False, "rel": net.relative(tokens.size(1))}
        maps = []
        for layer in net.layers:
            maps.append(layer.attn(x, ctx, need_weights=True, **kw)[1])
            x = layer(x, ctx, **kw)[0]
    assert len(extra["attn_layers"]) == 3 and torch.equal(extra["attn"][0], extra["attn_layers"][-1])
    assert not torch.allclose(maps[0], maps[2])  # layers differ, so the average is not any one of them
    for layers in (None, [1, 2], [0]):
        want = manual_average(maps, layers or range(3))
        torch.testing.assert_close(A.average_attention(extra["attn_layers"], layers), want, rtol=1e-5, atol=1e-6)
    assert torch.allclose(A.average_attention(extra["attn_layers"]).sum(-1), torch.ones(2, tokens.size(1)))
    with pytest.raises(ValueError, match="outside 1..3"):
        A.average_attention(extra["attn_layers"], [3])


def test_arc_mass_on_a_hand_made_three_word_sentence():
    """she watches videos: 1, 2 and 2 pieces after a leading </s>: positions 1 | 2 3 | 4 5."""
    heads, deprels = [2, 0, 2], ["nsubj", "root", "obj"]
    assert A.relation_arcs(deprels, heads, "obj") == [(1, 2)]
    assert A.relation_arcs(["nsubj", "root", "obj:lvc"], heads, "obj") == [(1, 2)]
    assert A.relation_arcs(deprels, heads, "iobj") == []
    spans = A.word_spans([0, 1, 3], 5, offset=1)
    assert spans == [range(1, 2), range(2, 4), range(4, 6)]
    attn = torch.arange(36, dtype=torch.float).view(6, 6) / 100
    # watches -> videos: rows 2, 3, columns 4, 5: ((.16 + .17) + (.22 + .23)) / 2
    assert A.arc_mass(attn, spans[1], spans[2]) == pytest.approx(0.39)
    # videos -> watches: rows 4, 5, columns 2, 3: ((.26 + .27) + (.32 + .33)) / 2
    assert A.arc_mass(attn, spans[2], spans[1]) == pytest.approx(0.59)
    # she -> watches: row 1, columns 2, 3
    assert A.arc_mass(attn, spans[0], spans[1]) == pytest.approx(0.17)


def test_parse_layers():
    assert A.parse_layers("2-3,5") == [1, 2, 4] and A.parse_layers(None) is None
    for bad in ("0", "3-2", "x"):
        with pytest.raises(A.AttentionAnalysisError):
            A.parse_layers(bad)


def test_corpus_analysis_decoder_and_encoder(data_dir, tmp_path):
    enc = SentenceEncoder(str(data_dir))
    d = enc.dictionary
    sentences = list(read_conllu(str(data_dir / "corpus.conllu")))
    models = OrderedDict(lm=(decoder_model(d), True), mlm=(encoder_model(d), False))
    report = A.analyse(models, sentences, enc, "obj", "head-dep")
    assert report["sentences_read"] == 3 and report["sentences_with_arcs"] == 2 and report["skipped"] == {}
    arcs = report["arcs"]
    assert [(r["query"], r["key"]) for r in arcs] == [("watches", "videos"), ("reads", "books")]
    # the causal decoder cannot see the object after its verb; the encoder sees both
    assert arcs[0]["mass"]["lm"] is None and report["summary"]["lm"]["not_visible"] == 1
    assert report["summary"]["lm"]["arcs"] == 1 and report["summary"]["mlm"]["arcs"] == 2
    # one arc by hand: "books she reads ." -> reads (word 3) at input position 3, books (word 1) at 1
    toks, terms, nts, _ = enc.encode(sentences[1].words, sentences[1].heads)
    with torch.no_grad():
        src = torch.cat([torch.tensor([d.eos()]), toks[:-1]])[None]
        a = torch.cat([torch.tensor([4]), terms[:-1]])[None]
        b = torch.cat([torch.tensor([4]), nts[:-1]])[None]
        maps = models["lm"][0](src, src_terminals=a, src_nonterminals=b, need_attn=True)[1]["attn_layers"]
    want = sum(m[0, h, 3, 1] for m in maps for h in range(4)).item() / 12
    assert arcs[1]["mass"]["lm"] == pytest.approx(want, rel=1e-5)
    assert report["summary"]["mlm"]["compared"] == 1
    table = A.attention_markdown(report)
    assert "| arcs scored | 1 | 2 |" in table and "| not visible (causal, key after query) | 1 | 0 |" in table
    # dep-head: object -> verb, visible to the decoder only where the object comes after the verb
    back = A.analyse(models, sentences, enc, "obj", "dep-head")
    assert back["summary"]["lm"]["not_visible"] == 1 and back["arcs"][0]["mass"]["lm"] is not None
    png = tmp_path / "map.png"
    labels = {"lm": ["</s>", "books", "she", "reads", "."], "mlm": ["<s>", "books", "she", "reads", ".", "</s>"]}
    A.plot_sentence(str(png), {"lm": torch.rand(5, 5), "mlm": torch.rand(6, 6)}, labels, [(range(3, 4), range(1, 2))])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_input_exits_2(data_dir, tmp_path):
    from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS
    from sipe_fairseq.cli.eval import main

    args = ["attention", "--data", str(data_dir), "--conllu", str(data_dir / "corpus.conllu")]
    assert main(args + ["--path", str(tmp_path / "missing.pt")]) == CHECKPOINT_EXIT_STATUS  # 3, as every sipe-* command
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tx\t_\t_\t_\t_\tz\tnsubj\t_\t_\n", encoding="utf-8")
    assert main(["attention", "--data", str(data_dir), "--conllu", str(bad), "--path", str(bad)]) == 2

"""``fairseq-eval-lm --inference-tags self`` (tasks ``hexatag_lm`` and ``gilt_lm``): each sample's
structure inputs replaced by the structure the model chooses from the prefix (``self``), so that
fairseq's ``SequenceScorer``, running the model once on them, prints the exact per-token
``log q(x_t | x_<t)``. Needs one sentence per row (``--sample-break-mode eos``)."""
import torch

from ..data.gilt.arcs import per_word
from ..data.gilt.gilt_dataset import MATRIX_KEYS, block_graph
from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from .family import StructureOptions, structure_of
from .hexatags import tag_ids
from .scoring import score_sentences
from .sentences import PAIR_INDEX, sentence_of


def _rows(sample, dictionary):
    """Per row: (its length n, its targets x_1 .. x_n </s>); ValueError for a row that is not one sentence."""
    net = sample["net_input"]
    src, target = net["src_tokens"], sample["target"]
    eos, pad = dictionary.eos(), dictionary.pad()
    for i in range(len(src)):
        n = int(target[i].ne(pad).sum())
        tokens = target[i, :n].cpu()
        if n < 1 or int(src[i, 0]) != eos or int(tokens[-1]) != eos or int(tokens.eq(eos).sum()) != 1 \
                or bool(target[i, n:].ne(pad).any()):
            raise ValueError(f"--inference-tags self: row {i} of sample {sample.get('id', ['?'] * len(src))[i]} is not one "
                             "sentence (</s> x_1 .. x_n </s>); use --sample-break-mode eos")
        yield i, n, tokens


@torch.no_grad()
def self_structured_sample(model, sample: dict, dictionary, options: StructureOptions = None) -> dict:
    """The sample with the model's own structure as input (module docstring)."""
    kind = structure_of(model)
    net = sample["net_input"]
    if kind == "none" or (kind == "hexatags" and "src_terminals" not in net):
        return sample
    eos = dictionary.eos()
    rows, sentences = [], []
    for i, n, tokens in _rows(sample, dictionary):
        if n < 2:
            continue  # an empty sentence: </s> only, no structure
        if kind == "hexatags":  # the word starts: the inputs that carry tags (delay: word 1 carries none)
            terms = torch.full_like(tokens, NOTAG_ID)
            terms[:n - 1] = net["src_terminals"][i, 1:n].cpu()
            terms[0] = FIRST_TAG_ID
            sentences.append(sentence_of(i, tokens, terms, None, dictionary, eos))
        else:
            word_no = net["src_words"][i, 1:n].cpu()  # block word of each input x_1 .. x_(n-1)
            starts = [q for q in range(n - 1) if int(word_no[q]) and (q == 0 or int(word_no[q]) != int(word_no[q - 1]))]
            terms = torch.full_like(tokens, NOTAG_ID)
            terms[torch.tensor(starts, dtype=torch.long)] = FIRST_TAG_ID  # marks the word starts
            sentences.append(sentence_of(i, tokens, terms, None, dictionary, eos))
        rows.append((i, n))
    if not sentences:
        return sample
    scores = score_sentences(model, sentences, "self", options, eos, dictionary.pad())
    if kind == "hexatags":
        new_terms, new_nts = net["src_terminals"].clone(), net["src_nonterminals"].clone()
        for (i, n), s, sc in zip(rows, sentences, scores):
            fed = sc.extra.get("fed", sc.tags)  # --tag-timing: what each word carried (None: nothing)
            kept = [(q, PAIR_INDEX[p]) for q, p in zip(s.starts, fed) if p is not None and "-" not in p]
            pos = torch.tensor([q for q, _ in kept], dtype=torch.long) + 1
            a, b = tag_ids(torch.tensor([p for _, p in kept], dtype=torch.long))
            new_terms[i, :n], new_nts[i, :n] = NOTAG_ID, NOTAG_ID
            new_terms[i, pos], new_nts[i, pos] = a.to(new_terms), b.to(new_nts)
        return dict(sample, net_input=dict(net, src_terminals=new_terms, src_nonterminals=new_nts))

    new = {key: net[key].clone() for key in MATRIX_KEYS}
    two_way = str(getattr(getattr(model, "decoder", model), "two_way_distance", "later-head"))
    for (i, _), s, sc in zip(rows, sentences, scores):
        graph = block_graph([per_word(sc.extra["arcs"], len(s.starts))], two_way)
        for key in MATRIX_KEYS:
            m = graph[key].shape[0]
            new[key][i] = 0
            new[key][i, :m, :m] = torch.from_numpy(graph[key]).to(new[key])
    return dict(sample, net_input=dict(net, **new))

"""The model's own tag choices after the gold prefix, for training on them (criterion ``hexatag_lm``):
scheduled sampling (``--tag-sampling``) and the marginal over tag sequences (``--tag-marginal``,
:mod:`.tag_marginal`). Each word's unit is chosen by the heads at the input before it, from one no-grad
forward with the gold tags, among the units the prefix automaton of the tag timing allows after the
*gold* units before it."""
import torch
import torch.nn.functional as F

from ..data.tag_dictionary import FIRST_TAG_ID
from ..data.tag_timing import sentence_start_inputs
from ..hexatag import NONTERMINALS, TERMINALS
from ..hexatag.constrained import PAIRS, START
from ..hexatag.errors import OptionError
from ..hexatag.timing import advance_unit

_PAIR_T = torch.tensor([TERMINALS.index(t) for t, _ in PAIRS])  # PAIRS column -> terminal class
_PAIR_N = torch.tensor([NONTERMINALS.index(n) for _, n in PAIRS])  # PAIRS column -> non-terminal class
_ALLOWED = {}  # (state, timing) -> the 10 PAIRS columns advance_unit takes from that state


def allowed_units(state: int, timing: str) -> tuple:
    """Which of the 10 units (PAIRS order) the prefix automaton of ``timing`` takes after ``state``."""
    key = (state, timing)
    if key not in _ALLOWED:
        _ALLOWED[key] = tuple(advance_unit(state, u, timing) is not None for u in PAIRS)
    return _ALLOWED[key]


def gold_prefix_words(tokens, terms, nts, starts, timing: str):
    """The words of a block and the prefix state before each along the gold units: lists
    (rows, positions, states) of the inputs that carry a unit (any tag), where the state is known. A
    sentence starts after an input in ``starts`` (``</s>``, ``<s>``); before the first one of a row the
    state is unknown (a block that starts mid-sentence), as after a unit the automaton refuses. An
    input with both tags <notag> carries nothing and does not move the state (``delay``: word 1)."""
    tagged_t, tagged_n = terms >= FIRST_TAG_ID, nts >= FIRST_TAG_ID
    is_start = sentence_start_inputs(tokens, starts)
    at = (is_start | tagged_t | tagged_n).nonzero().tolist()  # row-major: each row's positions in order
    if not at:
        return [], [], []
    idx = torch.tensor(at, device=terms.device)
    ib, jb = idx[:, 0], idx[:, 1]
    flags = torch.stack([is_start[ib, jb].long(), tagged_t[ib, jb].long(), tagged_n[ib, jb].long(),
                         terms[ib, jb] - FIRST_TAG_ID, nts[ib, jb] - FIRST_TAG_ID], 1).tolist()
    rows, cols, states = [], [], []
    row, state = -1, None
    for (b, j), (start, has_t, has_n, t, n) in zip(at, flags):
        if b != row:
            row, state = b, None
        if start:
            state = START
            continue
        if not (has_t and has_n):  # one tag without the other: not a unit, the state is unknown
            state = None
            continue
        if state is None:
            continue
        rows.append(b)
        cols.append(j)
        states.append(state)
        state = advance_unit(state, (TERMINALS[t], NONTERMINALS[n]), timing)
    return rows, cols, states


@torch.no_grad()
def choice_scores(model, sample, timing: str, starts):
    """The heads' scores of each word's allowed units after the gold prefix (one forward with the gold
    tags, dropout off): ``(rows, cols, score, gold)``, the inputs ``(rows, cols)`` whose unit the heads
    at ``cols - 1`` choose, ``score`` (words, 10) float64 log-probs in PAIRS order, ``-inf`` where the
    automaton refuses the unit, and the gold units as PAIRS columns. A part with no target (``nt-delay``
    word 1's ``EOS``) is fixed to the gold one and scores nothing. ``None`` when no word is chosen."""
    net_input = sample["net_input"]
    terms, nts = net_input["src_terminals"], net_input["src_nonterminals"]
    rows, cols, states = gold_prefix_words(net_input["src_tokens"], terms, nts, starts, timing)
    dev = terms.device
    if not rows:
        return None
    rows, cols = torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)
    allowed = torch.tensor([allowed_units(s, timing) for s in states], device=dev)
    anchor = cols - 1
    t_target = sample["terminal_target"][rows, anchor] - FIRST_TAG_ID
    n_target = sample["nonterminal_target"][rows, anchor] - FIRST_TAG_ID
    choose_t, choose_n = (t_target >= 0) & (t_target < len(TERMINALS)), (n_target >= 0) & (n_target < len(NONTERMINALS))
    keep = (cols >= 1) & (choose_t | choose_n) & allowed.any(1)
    rows, cols, anchor, allowed, choose_t, choose_n = (x[keep] for x in (rows, cols, anchor, allowed, choose_t, choose_n))
    if len(rows) == 0:
        return None
    gold_t, gold_n = terms[rows, cols] - FIRST_TAG_ID, nts[rows, cols] - FIRST_TAG_ID
    was_training = model.training
    model.eval()
    try:
        _, extra = model(**net_input)
    finally:
        model.train(was_training)
    if extra.get("terminal_logits") is None or extra.get("nonterminal_logits") is None:
        raise OptionError("training on the model's own tags needs a model with tag heads (--sipe-tag-heads)")
    pt, pn = _PAIR_T.to(dev), _PAIR_N.to(dev)
    lt = F.log_softmax(extra["terminal_logits"][rows, anchor].double(), -1)[:, pt]
    ln = F.log_softmax(extra["nonterminal_logits"][rows, anchor].double(), -1)[:, pn]
    score = torch.where(choose_t[:, None], lt, 0.0) + torch.where(choose_n[:, None], ln, 0.0)
    allowed = allowed & (choose_t[:, None] | (pt == gold_t[:, None])) & (choose_n[:, None] | (pn == gold_n[:, None]))
    gold = gold_t * len(NONTERMINALS) + gold_n  # PAIRS is terminal-major
    return rows, cols, score.masked_fill(~allowed, -torch.inf), gold


def model_choices(model, sample, timing: str, starts, how: str = "argmax"):
    """The heads' constrained choice per word of ``sample`` after the gold prefix (:func:`choice_scores`):
    ``how="argmax"`` takes the best allowed unit, ``"sample"`` draws one from the heads' distribution
    renormalized over the allowed units (torch's generator). Returns ``(rows, cols, choice, gold)``: the
    inputs ``(rows, cols)`` whose unit the heads at ``cols - 1`` choose, and the chosen and gold units as
    PAIRS columns (long, on the inputs' device). Argmax ties go to the first unit in PAIRS order, as the
    structure engine's greedy choice."""
    scored = choice_scores(model, sample, timing, starts)
    if scored is None:
        empty = torch.zeros(0, dtype=torch.long, device=sample["net_input"]["src_terminals"].device)
        return empty, empty, empty, empty
    rows, cols, score, gold = scored
    if how == "sample":
        choice = torch.multinomial(torch.softmax(score, 1), 1).squeeze(1)
    else:
        choice = score.argmax(1)  # the first maximum: PAIRS order on ties
    return rows, cols, choice, gold


def sample_word_tags(model, sample, p: float, timing: str, starts, how: str = "argmax"):
    """``(net_input, stats)``: the sample's input with a share ``p`` of the words' fed tags replaced by
    the heads' constrained choice after the gold prefix (:func:`model_choices` with ``how``; each word drawn with
    torch's generator, as :func:`drop_word_tags`), and the counts ``words``, ``replaced``, ``changed``
    (replaced and different from gold), ``differs`` (the choice differs from gold)."""
    net_input = sample["net_input"]
    rows, cols, choice, gold = model_choices(model, sample, timing, starts, how)
    terms, nts = net_input["src_terminals"], net_input["src_nonterminals"]
    draw = torch.rand(terms.shape, device=terms.device)[rows, cols] < p
    differs = choice != gold
    stats = {"words": len(rows), "replaced": int(draw.sum()), "changed": int((draw & differs).sum()),
             "differs": int(differs.sum())}
    rows, cols, choice = rows[draw], cols[draw], choice[draw]
    terms, nts = terms.clone(), nts.clone()
    terms[rows, cols] = FIRST_TAG_ID + _PAIR_T.to(terms.device)[choice]
    nts[rows, cols] = FIRST_TAG_ID + _PAIR_N.to(nts.device)[choice]
    return {**net_input, "src_terminals": terms, "src_nonterminals": nts}, stats

"""A toy English grammar with gold dependency trees: the demo's embedded, offline corpus.

A small probabilistic grammar (about 400 words) generates lower-case, space-tokenized sentences
such as ``the keys to the old cabinet near the doors are red .`` together with UD-style trees
(``nsubj obj det amod case nmod obl acl:relcl advmod aux cop mark ccomp conj cc punct root``)
and UD features (``Number=Sing|Plur`` on nouns, finite verbs, auxiliaries and reflexives).

Constructions: determiners and adjectives; prepositional modifiers of nouns (``nmod``) and verbs
(``obl``); subject and object relative clauses (``the dog that the cats chase``); sentential
complements (``the girl says that the dogs run``); coordinated subjects (plural agreement) and
coordinated clauses; perfect (``has/have``), negated (``does/do not``) and modal verb groups;
copular predicates (``are red``); reflexives (``the boys near the teacher like themselves``); and
the NPI ``ever``, generated only under a subject with the determiner ``no``. Embedding depth is
bounded and sentences longer than :data:`MAX_WORDS` are resampled. Trees are projective by
construction (each node's left dependents, the node, then its right dependents) and every tree is
checked.

Why it suits the demo: the number of a finite verb, auxiliary, copula or reflexive is fixed by
the head noun of its subject, which is often several words back and separated from the verb by
prepositional phrases or relative clauses containing "attractor" nouns of the other number. A
model that sees only the word sequence has to learn to track the head noun across that material;
the hexatags of the gold trees expose exactly this structure. :func:`minimal_pairs` builds
BLiMP-style agreement test items to measure the difference.

Usage: ``python -m sipe_fairseq.data.toy_grammar --out DIR`` writes ``DIR/{train,valid,test}.conllu``
(about 300k training words) and ``DIR/minimal_pairs.jsonl``.
"""
import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from sipe_fairseq.data.writers import atomic_open
from sipe_fairseq.hexatag import check_tree, is_projective
from sipe_fairseq.hexatag.conllu_io import conllu_sentence

MAX_WORDS = 30  # longer sentences (punctuation included) are resampled
MAX_DEPTH = 2  # nouns/clauses at this embedding depth take no PP, relative clause or complement
SING, PLUR = "Sing", "Plur"

# ---------------------------------------------------------------------------------- lexicon
# nouns: (singular, plural[, gender]) per semantic class
PERSONS = [
    ("boy", "boys", "Masc"), ("girl", "girls", "Fem"), ("man", "men", "Masc"),
    ("woman", "women", "Fem"), ("king", "kings", "Masc"), ("queen", "queens", "Fem"),
    ("brother", "brothers", "Masc"), ("sister", "sisters", "Fem"), ("father", "fathers", "Masc"),
    ("mother", "mothers", "Fem"), ("uncle", "uncles", "Masc"), ("aunt", "aunts", "Fem"),
    ("prince", "princes", "Masc"), ("princess", "princesses", "Fem"), ("teacher", "teachers", None),
    ("doctor", "doctors", None), ("student", "students", None), ("farmer", "farmers", None),
    ("child", "children", None), ("nurse", "nurses", None), ("pilot", "pilots", None),
    ("singer", "singers", None), ("lawyer", "lawyers", None), ("neighbor", "neighbors", None),
    ("friend", "friends", None), ("baker", "bakers", None), ("guard", "guards", None),
    ("officer", "officers", None),
]
ANIMALS = [
    ("dog", "dogs"), ("cat", "cats"), ("horse", "horses"), ("bird", "birds"), ("mouse", "mice"),
    ("rabbit", "rabbits"), ("fox", "foxes"), ("wolf", "wolves"), ("duck", "ducks"),
    ("goose", "geese"), ("lion", "lions"), ("bear", "bears"), ("cow", "cows"),
    ("monkey", "monkeys"), ("frog", "frogs"), ("owl", "owls"),
]
THINGS = [
    ("key", "keys"), ("box", "boxes"), ("cabinet", "cabinets"), ("door", "doors"),
    ("table", "tables"), ("chair", "chairs"), ("book", "books"), ("cup", "cups"),
    ("lamp", "lamps"), ("window", "windows"), ("bottle", "bottles"), ("picture", "pictures"),
    ("letter", "letters"), ("car", "cars"), ("ball", "balls"), ("shelf", "shelves"),
    ("knife", "knives"), ("clock", "clocks"), ("bag", "bags"), ("coin", "coins"),
    ("flower", "flowers"), ("bell", "bells"), ("basket", "baskets"), ("hat", "hats"),
    ("map", "maps"), ("bench", "benches"),
]
PLACES = [
    ("garden", "gardens"), ("house", "houses"), ("park", "parks"), ("river", "rivers"),
    ("city", "cities"), ("school", "schools"), ("bridge", "bridges"), ("station", "stations"),
    ("market", "markets"), ("forest", "forests"), ("tower", "towers"), ("kitchen", "kitchens"),
    ("room", "rooms"), ("village", "villages"),
]
NOUNS = {"person": PERSONS, "animal": ANIMALS, "thing": THINGS, "place": PLACES}
ANIMATE = ("person", "animal")
ANY = ("person", "animal", "thing", "place")

ADJECTIVES = {
    "person": ["happy", "tired", "young", "tall", "angry", "hungry", "quiet", "clever", "brave",
               "sick", "busy", "lazy", "kind", "proud", "old", "small"],
    "animal": ["happy", "tired", "young", "angry", "hungry", "quiet", "clever", "brave", "sick",
               "lazy", "old", "small", "big", "wild", "fat", "brown"],
    "thing": ["red", "blue", "green", "old", "new", "small", "big", "heavy", "broken", "wooden",
              "dusty", "bright", "dark", "empty", "cheap", "round"],
    "place": ["old", "new", "small", "big", "quiet", "dark", "famous", "busy", "empty", "beautiful",
              "cold", "warm", "clean", "dirty", "large", "strange"],
}
DEGREE = ["very", "quite", "really"]

# verbs: (plural/base, 3rd singular, participle)
INTRANSITIVE = {
    "animate": [
        ("run", "runs", "run"), ("sleep", "sleeps", "slept"), ("smile", "smiles", "smiled"),
        ("laugh", "laughs", "laughed"), ("wait", "waits", "waited"), ("swim", "swims", "swum"),
        ("sing", "sings", "sung"), ("dance", "dances", "danced"), ("work", "works", "worked"),
        ("cry", "cries", "cried"), ("jump", "jumps", "jumped"), ("walk", "walks", "walked"),
        ("rest", "rests", "rested"), ("sit", "sits", "sat"), ("play", "plays", "played"),
    ],
    "thing": [
        ("fall", "falls", "fallen"), ("break", "breaks", "broken"), ("shine", "shines", "shone"),
        ("move", "moves", "moved"), ("shake", "shakes", "shaken"), ("turn", "turns", "turned"),
        ("roll", "rolls", "rolled"), ("glow", "glows", "glowed"),
    ],
}
# (forms, subject classes, object classes)
TRANSITIVE = [
    (("see", "sees", "seen"), ANIMATE, ANY), (("like", "likes", "liked"), ANIMATE, ANY),
    (("watch", "watches", "watched"), ANIMATE, ANY), (("find", "finds", "found"), ANIMATE, ANY),
    (("follow", "follows", "followed"), ANIMATE, ANIMATE),
    (("chase", "chases", "chased"), ANIMATE, ANIMATE),
    (("help", "helps", "helped"), ("person",), ANIMATE),
    (("admire", "admires", "admired"), ("person",), ANY),
    (("meet", "meets", "met"), ("person",), ("person",)),
    (("visit", "visits", "visited"), ("person",), ("person", "place")),
    (("carry", "carries", "carried"), ANIMATE, ("thing",)),
    (("hold", "holds", "held"), ("person",), ("thing",)),
    (("open", "opens", "opened"), ("person",), ("thing",)),
    (("clean", "cleans", "cleaned"), ("person",), ("thing", "place")),
    (("paint", "paints", "painted"), ("person",), ("thing", "place")),
    (("build", "builds", "built"), ("person",), ("thing", "place")),
    (("push", "pushes", "pushed"), ANIMATE, ("thing", "animal")),
    (("want", "wants", "wanted"), ANIMATE, ("thing",)),
    (("buy", "buys", "bought"), ("person",), ("thing", "animal")),
    (("sell", "sells", "sold"), ("person",), ("thing", "animal")),
]
REFLEXIVE_VERBS = [
    (("see", "sees", "seen"), ANIMATE), (("like", "likes", "liked"), ANIMATE),
    (("watch", "watches", "watched"), ANIMATE), (("hurt", "hurts", "hurt"), ANIMATE),
    (("wash", "washes", "washed"), ANIMATE), (("admire", "admires", "admired"), ("person",)),
    (("help", "helps", "helped"), ("person",)), (("blame", "blames", "blamed"), ("person",)),
    (("trust", "trusts", "trusted"), ("person",)),
]
SAY_VERBS = [
    ("say", "says", "said"), ("think", "thinks", "thought"), ("know", "knows", "known"),
    ("believe", "believes", "believed"), ("hope", "hopes", "hoped"), ("hear", "hears", "heard"),
]
AUXILIARIES = {"be": ("are", "is"), "have": ("have", "has"), "do": ("do", "does")}
MODALS = ["can", "will", "must", "may", "should"]
PREVERBAL = ["often", "always", "rarely", "sometimes", "usually"]
MANNER = ["quickly", "slowly", "loudly", "quietly", "happily", "carefully"]
PREPOSITIONS = ["near", "behind", "beside", "under", "above", "on", "in", "with", "by", "to",
                "from", "without"]
OBL_PREPOSITIONS = ["near", "behind", "beside", "under", "in", "by", "with"]
DETERMINERS = {  # (form, weight, features)
    SING: [("the", 11, "Definite=Def|PronType=Art"), ("a", 4, "Definite=Ind|PronType=Art"),
           ("this", 2, "Number=Sing|PronType=Dem"), ("every", 1, "PronType=Tot"),
           ("no", 1, "PronType=Neg")],
    PLUR: [("the", 11, "Definite=Def|PronType=Art"), ("these", 3, "Number=Plur|PronType=Dem"),
           ("some", 3, "PronType=Ind"), ("many", 1, "PronType=Ind"), ("no", 2, "PronType=Neg")],
}
REFLEXIVES = {"Masc": "himself", "Fem": "herself", None: "itself"}
PAIR_UIDS = ("toy_agreement_across_pp", "toy_agreement_across_relative_clause", "toy_anaphor_agreement")


def _feats(s: str) -> Dict[str, str]:
    return dict(kv.split("=") for kv in s.split("|")) if s else {}


def _finite_feats(number: str) -> Dict[str, str]:
    return {"Mood": "Ind", "Number": number, "Person": "3", "Tense": "Pres", "VerbForm": "Fin"}


def _has_no(subj: "Node") -> bool:
    return bool(subj.left) and subj.left[0].form == "no"


def _other(number: str) -> str:
    return PLUR if number == SING else SING


# ------------------------------------------------------------------------------------ trees
@dataclass(eq=False)
class Node:
    """A word and its dependents; linear order is ``left``, the word, ``right``."""
    form: str
    lemma: str
    upos: str
    deprel: str
    feats: Dict[str, str] = field(default_factory=dict)
    left: List["Node"] = field(default_factory=list)
    right: List["Node"] = field(default_factory=list)
    alt: Optional[str] = None  # the form with the other number (agreeing words only)
    agr: Optional[str] = None  # nouns: number the verb agrees with (plural when coordinated)
    cls: Optional[str] = None  # nouns: semantic class
    gender: Optional[str] = None  # persons: Masc / Fem / None
    agree: Optional["Node"] = None  # predicates: the finite word agreeing with the subject


@dataclass
class ToySentence:
    """A generated sentence: parallel per-word lists, heads 1-based (0 = root)."""
    words: List[str]
    lemmas: List[str]
    upos: List[str]
    feats: List[str]  # CoNLL-U FEATS strings ("_" when empty)
    heads: List[int]
    deprels: List[str]
    sent_id: Optional[str] = None

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def to_conllu(self) -> str:
        comments = [("sent_id", self.sent_id)] if self.sent_id else []
        comments.append(("text", self.text))
        return conllu_sentence(self.words, self.heads, self.deprels, comments, lemma=self.lemmas, upos=self.upos,
                               feats=self.feats)


def _linearize(root: Node) -> Tuple[ToySentence, Dict[int, int]]:
    """Flatten a tree in order; also return ``id(node) -> 0-based position``."""
    order: List[Tuple[Node, Optional[Node]]] = []

    def visit(node: Node, parent: Optional[Node]) -> None:
        for child in node.left:
            visit(child, node)
        order.append((node, parent))
        for child in node.right:
            visit(child, node)

    visit(root, None)
    pos = {id(node): i for i, (node, _) in enumerate(order)}
    heads = [0 if p is None else pos[id(p)] + 1 for _, p in order]
    check_tree(heads)
    assert is_projective(heads), heads
    nodes = [n for n, _ in order]
    sent = ToySentence(
        words=[n.form for n in nodes], lemmas=[n.lemma for n in nodes], upos=[n.upos for n in nodes],
        feats=["|".join(f"{k}={v}" for k, v in sorted(n.feats.items())) or "_" for n in nodes],
        heads=heads, deprels=[n.deprel for n in nodes])
    return sent, pos


# ---------------------------------------------------------------------------------- grammar
class _Grammar:
    """Random tree builders; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, seq):
        return self.rng.choice(seq)

    def number(self) -> str:
        return self.pick((SING, PLUR))

    # noun phrases
    def noun_phrase(self, classes: Sequence[str], depth: int, deprel: str, number: Optional[str] = None,
                    mod: Optional[str] = None, attractor: Optional[str] = None) -> Node:
        """Det (Adj) Noun [PP | relative clause]; ``mod`` forces the modifier ("pp", "rc", "")."""
        cls = self.pick(classes)
        entry = self.pick(NOUNS[cls])
        number = number or self.number()
        noun = Node(entry[0] if number == SING else entry[1], entry[0], "NOUN", deprel, {"Number": number},
                    agr=number, cls=cls, gender=entry[2] if cls == "person" else None)
        dets = [d for d in DETERMINERS[number] if d[0] != "no" or deprel == "nsubj"]  # "no" licenses "ever"
        det, _, det_feats = self.rng.choices(dets, weights=[w for _, w, _ in dets])[0]
        noun.left.append(Node(det, det, "DET", "det", _feats(det_feats)))
        if self.chance(0.3):
            adjs = self.rng.sample(ADJECTIVES[cls], 2 if self.chance(0.15) else 1)
            noun.left += [Node(a, a, "ADJ", "amod", {"Degree": "Pos"}) for a in adjs]
        next_word = noun.left[1].form if len(noun.left) > 1 else noun.form
        if det == "a" and next_word[0] in "aeiou":
            noun.left[0].form = "an"
        if mod is None:
            weights = ((0.5, 0.3, 0.2), (0.7, 0.2, 0.1))[depth] if depth < MAX_DEPTH else (1, 0, 0)
            mod = self.rng.choices(("", "pp", "rc"), weights)[0]
        if mod == "pp":
            noun.right.append(self.prep_phrase(depth + 1, "nmod", number=attractor))
        elif mod == "rc":
            noun.right.append(self.relative_clause(noun, depth + 1, attractor))
        return noun

    def prep_phrase(self, depth: int, deprel: str, number: Optional[str] = None) -> Node:
        preps = PREPOSITIONS if deprel == "nmod" else OBL_PREPOSITIONS
        classes = ("thing", "place") if deprel == "obl" or self.chance(0.7) else ANIMATE
        noun = self.noun_phrase(classes, depth, deprel, number)
        prep = self.pick(preps)
        noun.left.insert(0, Node(prep, prep, "ADP", "case"))
        return noun

    def subject(self, depth: int) -> Node:
        cls = self.rng.choices(ANY, (0.45, 0.3, 0.2, 0.05))[0]
        if not self.chance(0.08):
            return self.noun_phrase((cls,), depth, "nsubj")
        first = self.noun_phrase((cls,), depth, "nsubj", mod="")
        second = self.noun_phrase((cls,), depth, "conj", mod="")
        second.left.insert(0, Node("and", "and", "CCONJ", "cc"))
        first.right.append(second)
        first.agr = PLUR
        return first

    # clauses
    def relative_clause(self, antecedent: Node, depth: int, attractor: Optional[str] = None) -> Node:
        """Subject relative (``that chases the cats``) or object relative (``that the cats chase``).
        With ``attractor`` (animate antecedents only) the inner subject or object takes that number."""
        transitive_obj = [v for v in TRANSITIVE if antecedent.cls in v[2]]
        if self.chance(0.5) and transitive_obj:  # object relative: the verb agrees with the inner subject
            forms, subj_classes, _ = self.pick(transitive_obj)
            subj = self.noun_phrase(subj_classes, depth, "nsubj", number=attractor)
            pred = self.verb_group(forms, subj, self.aspect())
            pred.left.insert(0, Node("that", "that", "PRON", "obj", {"PronType": "Rel"}))
        else:
            rel = "who" if antecedent.cls == "person" and self.chance(0.5) else "that"
            pro = Node(rel, rel, "PRON", "nsubj", {"PronType": "Rel"})
            kind = "trans" if attractor else None
            pred = self.clause(depth, pro, antecedent, kind=kind, obj_number=attractor)
        pred.deprel = "acl:relcl"
        return pred

    def aspect(self) -> str:
        return self.rng.choices(("simple", "perfect", "neg", "modal"), (0.6, 0.15, 0.1, 0.15))[0]

    def verb_group(self, forms, subj: Node, aspect: str) -> Node:
        """[subj] [aux | do not | modal] [adverb] verb; the subject goes first in ``left``."""
        base, third, part = forms
        number = subj.agr
        if aspect == "neg" and _has_no(subj):  # no double negation
            aspect = "simple"
        if aspect == "simple":
            verb = Node(base if number == PLUR else third, base, "VERB", "", _finite_feats(number),
                        alt=third if number == PLUR else base)
            aux = []
            verb.agree = verb
        else:
            verb = Node(part, base, "VERB", "", {"Tense": "Past", "VerbForm": "Part"}) if aspect == "perfect" \
                else Node(base, base, "VERB", "", {"VerbForm": "Inf"})
            if aspect == "modal":
                modal = self.pick(MODALS)
                aux = [Node(modal, modal, "AUX", "aux", {"VerbForm": "Fin"})]
            else:
                lemma = "have" if aspect == "perfect" else "do"
                aux = [self.finite_aux(lemma, number, "aux")]
                verb.agree = aux[0]
                if aspect == "neg":
                    aux.append(Node("not", "not", "PART", "advmod", {"Polarity": "Neg"}))
        verb.left = [subj] + aux
        if aspect != "neg" and _has_no(subj) and self.chance(0.3):
            verb.left.append(Node("ever", "ever", "ADV", "advmod"))  # NPI licensed by "no"
        elif aspect in ("simple", "perfect") and self.chance(0.1):
            adv = self.pick(PREVERBAL)
            verb.left.append(Node(adv, adv, "ADV", "advmod"))
        return verb

    def finite_aux(self, lemma: str, number: str, deprel: str) -> Node:
        plur, sing = AUXILIARIES[lemma]
        return Node(plur if number == PLUR else sing, lemma, "AUX", deprel, _finite_feats(number),
                    alt=sing if number == PLUR else plur)

    def clause(self, depth: int, subj: Optional[Node] = None, antecedent: Optional[Node] = None,
               kind: Optional[str] = None, aspect: Optional[str] = None, obj_number: Optional[str] = None) -> Node:
        """A clause headed by its predicate. ``antecedent`` carries number, class and gender when
        the subject is a relative pronoun. ``kind``: intrans, trans, refl, say or cop."""
        subj = subj or self.subject(depth)
        info = antecedent or subj
        subj.agr = info.agr
        if kind is None:
            kinds = {"person": (0.25, 0.3, 0.08, 0.12 if depth < MAX_DEPTH else 0, 0.25),
                     "animal": (0.3, 0.35, 0.08, 0, 0.27), "thing": (0.4, 0, 0, 0, 0.6),
                     "place": (0, 0, 0, 0, 1)}[info.cls]
            kind = self.rng.choices(("intrans", "trans", "refl", "say", "cop"), kinds)[0]
        if kind == "cop":
            adj = self.pick(ADJECTIVES[info.cls])
            pred = Node(adj, adj, "ADJ", "", {"Degree": "Pos"})
            cop = self.finite_aux("be", info.agr, "cop")
            pred.left = [subj, cop]
            pred.agree = cop
            if not _has_no(subj) and self.chance(0.1):
                pred.left.append(Node("not", "not", "PART", "advmod", {"Polarity": "Neg"}))
            if self.chance(0.15):
                deg = self.pick(DEGREE)
                pred.left.append(Node(deg, deg, "ADV", "advmod"))
            return pred
        aspect = aspect or self.aspect()
        if kind == "intrans":
            forms = self.pick(INTRANSITIVE["animate" if info.cls in ANIMATE else "thing"])
            pred = self.verb_group(forms, subj, aspect)
            if depth < MAX_DEPTH and self.chance(0.3):
                pred.right.append(self.prep_phrase(depth + 1, "obl"))
        elif kind == "trans":
            forms, _, obj_classes = self.pick([v for v in TRANSITIVE if info.cls in v[1]])
            pred = self.verb_group(forms, subj, aspect)
            pred.right.append(self.noun_phrase(obj_classes, depth + 1, "obj", number=obj_number))
        elif kind == "refl":
            forms, _ = self.pick([v for v in REFLEXIVE_VERBS if info.cls in v[1]])
            pred = self.verb_group(forms, subj, aspect)
            pred.right.append(self.reflexive(info))
        else:  # say: sentential complement
            pred = self.verb_group(self.pick(SAY_VERBS), subj, aspect)
            comp = self.clause(depth + 1)
            comp.deprel = "ccomp"
            if self.chance(0.8):
                comp.left.insert(0, Node("that", "that", "SCONJ", "mark"))
            pred.right.append(comp)
        if kind != "say" and self.chance(0.1):
            adv = self.pick(MANNER)
            pred.right.append(Node(adv, adv, "ADV", "advmod"))
        return pred

    def reflexive(self, info: Node) -> Node:
        gender = info.gender or (self.pick(("Masc", "Fem")) if info.cls == "person" else None)
        sing, plur = REFLEXIVES[gender], "themselves"
        form, alt = (sing, plur) if info.agr == SING else (plur, sing)
        feats = {"Case": "Acc", "Number": info.agr, "Person": "3", "PronType": "Prs", "Reflex": "Yes"}
        if info.agr == SING and gender:
            feats["Gender"] = gender
        return Node(form, form, "PRON", "obj", feats, alt=alt)

    def sentence(self) -> Node:
        root = self.clause(0)
        root.deprel = "root"
        if self.chance(0.1):
            conj = self.clause(1)
            conj.deprel = "conj"
            cc = self.pick(("and", "but"))
            conj.left.insert(0, Node(cc, cc, "CCONJ", "cc"))
            root.right.append(conj)
        root.right.append(Node(".", ".", "PUNCT", "punct"))
        return root


def _bounded(build) -> Tuple[ToySentence, Dict[int, int], Node]:
    """Call ``build()`` until the sentence has at most :data:`MAX_WORDS` words."""
    while True:
        root = build()
        sent, pos = _linearize(root)
        if len(sent.words) <= MAX_WORDS:
            return sent, pos, root


# -------------------------------------------------------------------------------------- API
def generate(n: int, seed, id_prefix: str = "toy") -> List[ToySentence]:
    """``n`` sentences with gold trees, deterministic for a given ``seed`` (int or str)."""
    grammar = _Grammar(random.Random(seed))
    out = []
    for k in range(1, n + 1):
        sent = _bounded(grammar.sentence)[0]
        sent.sent_id = f"{id_prefix}-{k}"
        out.append(sent)
    return out


def write_conllu(sentences: Sequence[ToySentence], path) -> None:
    """Write CoNLL-U (10 columns, ``# sent_id`` and ``# text`` comments), atomically."""
    with atomic_open(path) as f:
        f.writelines(s.to_conllu() for s in sentences)


def corpus_stats(sentences: Sequence[ToySentence]) -> Dict[str, float]:
    words = sum(len(s.words) for s in sentences)
    return {"sentences": len(sentences), "words": words, "vocab": len({w for s in sentences for w in s.words}),
            "mean_length": round(words / max(len(sentences), 1), 2)}


def make_corpus(out_dir, n_train: int = 30000, n_valid: int = 3000, n_test: int = 3000,
                seed: int = 1) -> Dict[str, Dict[str, float]]:
    """Write ``train/valid/test.conllu`` (independent random streams); return per-split stats."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        sents = generate(n, f"{seed}/{split}", id_prefix=split)
        write_conllu(sents, out / f"{split}.conllu")
        stats[split] = corpus_stats(sents)
    return stats


def _pair_tree(g: _Grammar, uid: str) -> Node:
    """A one-clause sentence whose subject is separated from the agreeing word by an attractor."""
    number, aspect = g.number(), g.pick(("simple", "perfect", "neg"))
    kind = None
    if uid == "toy_anaphor_agreement":
        kind, subj = "refl", None
        while subj is None or not subj.gender:  # himself/herself must follow from the subject
            subj = g.noun_phrase(("person",), 0, "nsubj", number, mod=g.pick(("pp", "")), attractor=_other(number))
    elif uid == "toy_agreement_across_pp":
        subj = g.noun_phrase(ANY, 0, "nsubj", number, mod="pp", attractor=_other(number))
    else:
        subj = g.noun_phrase(ANIMATE, 0, "nsubj", number, mod="rc", attractor=_other(number))
    root = g.clause(0, subj, kind=kind, aspect=aspect)
    root.deprel = "root"
    root.right.append(Node(".", ".", "PUNCT", "punct"))
    return root


def minimal_pair_trees(n: int, seed) -> List[Tuple[ToySentence, int, str, str]]:
    """``(good sentence, 0-based index of the agreeing word, its other-number form, UID)``.

    UIDs cycle through :data:`PAIR_UIDS`. The agreeing word (finite verb/auxiliary/copula, or the
    reflexive) is separated from the subject's head noun by an attractor noun of the other number
    in a PP or relative clause (anaphor items: gendered person subjects, PP attractor optional)."""
    g = _Grammar(random.Random(f"pairs/{seed}"))
    out = []
    for k in range(n):
        uid = PAIR_UIDS[k % len(PAIR_UIDS)]
        sent, pos, root = _bounded(lambda: _pair_tree(g, uid))
        if uid == "toy_anaphor_agreement":
            target = next(c for c in root.right if "Reflex" in c.feats)
        else:
            target = root.agree
        out.append((sent, pos[id(target)], target.alt, uid))
    return out


def minimal_pairs(n: int, seed) -> List[Dict[str, str]]:
    """BLiMP-style agreement minimal pairs: the bad sentence flips the agreeing word's number."""
    pairs = []
    for k, (good, i, bad_form, uid) in enumerate(minimal_pair_trees(n, seed)):
        term = "anaphor_agreement" if uid == "toy_anaphor_agreement" else "subject_verb_agreement"
        bad = good.words[:i] + [bad_form] + good.words[i + 1:]
        pairs.append({"sentence_good": good.text, "sentence_bad": " ".join(bad), "field": "syntax",
                      "linguistics_term": term, "UID": uid, "pairID": str(k)})
    return pairs


def write_jsonl(pairs: Sequence[Dict[str, str]], path) -> None:
    with atomic_open(path) as f:
        f.writelines(json.dumps(p) + "\n" for p in pairs)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m sipe_fairseq.data.toy_grammar",
                                description="Generate the toy dependency corpus and agreement minimal pairs.")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--train", type=int, default=30000, help="training sentences (default %(default)s)")
    p.add_argument("--valid", type=int, default=3000, help="validation sentences (default %(default)s)")
    p.add_argument("--test", type=int, default=3000, help="test sentences (default %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default %(default)s)")
    p.add_argument("--pairs", type=int, default=3000,
                   help="minimal pairs written to OUT/minimal_pairs.jsonl, 0 for none (default %(default)s)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    stats = make_corpus(args.out, args.train, args.valid, args.test, args.seed)
    for split, s in stats.items():
        print(f"{split}: {s['sentences']} sentences, {s['words']} words, vocab {s['vocab']}, "
              f"mean length {s['mean_length']}", file=sys.stderr)
    if args.pairs:
        write_jsonl(minimal_pairs(args.pairs, args.seed), Path(args.out) / "minimal_pairs.jsonl")
        print(f"minimal_pairs: {args.pairs} pairs", file=sys.stderr)
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()

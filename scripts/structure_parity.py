#!/usr/bin/env python
"""One-off check (issue 22): the structure engine (sipe_fairseq/structure) against the four modules it
replaced (eval/prefix_tags.py, eval/gilt_scoring.py), per sentence, on a SiPE and a GiLT checkpoint.
Runs only on a tree that still has both (the commit that added this script).

    .venv/bin/python scripts/structure_parity.py --data runs/ewt/data-bin --sipe CKPT --gilt CKPT [--sentences 100]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--sipe")
    p.add_argument("--gilt")
    p.add_argument("--split", default="test")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--sources", default="given,self,beam:1,beam:4,beam:16")
    a = p.parse_args()
    import torch

    import sipe_fairseq
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.eval import gilt_scoring, prefix_tags
    from sipe_fairseq.eval.prefix_scores import load_split_sentences
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.scoring import score_sentences

    torch.set_num_threads(1)
    sipe_fairseq.register()
    sources = a.sources.split(",")
    print("| checkpoint | source | sentences | max rel. diff log p | max rel. diff joint | old s | new s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, path in (("sipe", a.sipe), ("gilt", a.gilt)):
        if not path:
            continue
        model, task = load_lm(path, a.data)
        model.eval()
        d = task.source_dictionary
        new_sents, _ = load_split_sentences(task, a.split)
        new_sents = new_sents[:a.sentences]
        placement = str(getattr(task.args, "tag_head_placement", "first_subword"))
        if name == "sipe":
            old_sents = prefix_tags.load_split_sentences(task, a.split)[:a.sentences]
        else:
            old_sents = gilt_scoring.read_sentences(a.data, a.split, d, a.sentences)
        for source in sources:
            t0 = time.process_time()
            if name == "sipe":
                old = prefix_tags.score_sentences(model, old_sents, source, placement, True, dictionary=d, eos=d.eos(),
                                                  pad=d.pad())
            else:
                with torch.no_grad():
                    old = [gilt_scoring.score_source(model, w, d.eos(), source, 5, g) for w, g in old_sents]
            t1 = time.process_time()
            opts = StructureOptions(placement=placement, count_beam=5, count_rule="allowed-then-top")
            new = score_sentences(model, new_sents, source, opts, d.eos(), d.pad())
            t2 = time.process_time()
            rel = lambda x, y: abs(x - y) / max(1.0, abs(x))  # noqa: E731
            lp = max(rel(o.logprob, n.logprob) for o, n in zip(old, new))
            jt = max(rel(o.joint, n.joint) for o, n in zip(old, new))
            print(f"| {name} | {source} | {len(new)} | {lp:.1e} | {jt:.1e} | {t1 - t0:.1f} | {t2 - t1:.1f} |", flush=True)


if __name__ == "__main__":
    main()

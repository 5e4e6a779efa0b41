"""Criterion hexatag_lm's --distill-teacher / --distill-weight: in training the LM term is
(1 - alpha) NLL + alpha CE(teacher, student), the teacher reading the batch's gold tags; validation
scores the plain loss; the teacher is frozen and is not one of the criterion's parameters. Checked
against an independent float64 computation, and through fairseq-train (the refusals too)."""
import copy
import re

import pytest
import torch
import torch.nn.functional as F

import launcher
import sipe_fairseq  # noqa: F401
from sipe_fairseq.criterions.hexatag_lm import HexatagLMCriterion
from sipe_fairseq.hexatag.errors import OptionError
from conftest import BIN, ENV, small_dictionary, txl  # noqa: E402
from test_tag_sampling import Recorder, batch_of, random_trees, run, task_for  # noqa: E402
from test_word_aware_heads import make_word_model  # noqa: E402

# The criterion computes the distillation term in float32 (as under --fp16 training it must); the test
# computes it in float64. A sum of a few hundred per-token cross-entropies of a 50-symbol softmax: rel 1e-5.
REL = 1e-5


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)  # test_tag_sampling's


class Teacher(torch.nn.Module):
    """A decoder that records every input it is fed (in eval mode too)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.fed = inner, []

    def get_normalized_probs(self, *args, **kwargs):
        return self.inner.get_normalized_probs(*args, **kwargs)

    def forward(self, **net_input):
        self.fed.append((net_input["src_terminals"].clone(), net_input["src_nonterminals"].clone()))
        return self.inner(**net_input)


@torch.no_grad()
def nll_and_ce(student, teacher, sample, student_input=None):
    """Independent float64 sums over the target tokens: the student's NLL, CE(teacher, student) and
    the teacher's entropy (the teacher reads the gold tags; the student ``student_input`` if given)."""
    target = sample["target"]
    keep = target != 1  # fairseq's pad
    was = student.training
    student.train()
    s = F.log_softmax(student(**(student_input or sample["net_input"]))[0].double(), -1)
    student.train(was)
    t = F.log_softmax(teacher(**sample["net_input"])[0].double(), -1)
    nll = -s.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep].sum()
    ce = -(t.exp() * s).sum(-1)[keep].sum()
    ent = -(t.exp() * t).sum(-1)[keep].sum()
    return float(nll), float(ce), float(ent)


@pytest.mark.parametrize("alpha", [0.3, 1.0])
@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_training_loss_mixes_nll_and_teacher_ce(dictionary, timing, alpha):
    student = make_word_model(dictionary, seed=1)
    teacher = make_word_model(dictionary, seed=2)
    sample = batch_of(dictionary, [random_trees(3, seed=60 + s) for s in range(5)], timing)
    task = task_for(dictionary, timing)
    plain, _ = run(HexatagLMCriterion(task), student, sample)  # LM NLL + tag losses
    crit = HexatagLMCriterion(task, distill_weight=alpha)
    crit.set_teacher(teacher)
    loss, log = run(crit, student, sample)
    nll, ce, ent = nll_and_ce(student, teacher, sample)
    assert ce - nll != pytest.approx(0, abs=1.0)  # the teacher differs from the targets: the test is not trivial
    assert loss == pytest.approx(plain + alpha * (ce - nll), rel=REL)
    assert float(log["lm_loss"]) == pytest.approx(nll, rel=REL)  # the logged LM loss stays the plain NLL (float32)
    assert float(log["distill_kl"]) == pytest.approx(ce - ent, rel=REL)


def test_teacher_reads_gold_tags_while_the_student_reads_its_own(dictionary):
    student = Recorder(make_word_model(dictionary, seed=1))
    teacher = Teacher(make_word_model(dictionary, seed=2))
    sample = batch_of(dictionary, [random_trees(3, seed=70 + s) for s in range(5)], "paper")
    crit = HexatagLMCriterion(task_for(dictionary), tag_sampling=1.0, distill_weight=0.5)
    crit.set_teacher(teacher)
    loss, _ = run(crit, student, sample)
    gold_t, gold_n = sample["net_input"]["src_terminals"], sample["net_input"]["src_nonterminals"]
    assert len(teacher.fed) == 1 and torch.equal(teacher.fed[0][0], gold_t) and torch.equal(teacher.fed[0][1], gold_n)
    fed_t, fed_n = student.fed[-1]
    assert bool(((fed_t != gold_t) | (fed_n != gold_n)).any())  # the student was fed other tags
    plain, _ = run(HexatagLMCriterion(task_for(dictionary)), student,
                   {**sample, "net_input": {**sample["net_input"], "src_terminals": fed_t, "src_nonterminals": fed_n}})
    nll, ce, _ = nll_and_ce(student.inner, teacher.inner, sample,
                            {**sample["net_input"], "src_terminals": fed_t, "src_nonterminals": fed_n})
    assert loss == pytest.approx(plain + 0.5 * (ce - nll), rel=REL)


def test_a_copy_as_teacher_has_zero_kl_and_validation_is_plain(dictionary):
    student = make_word_model(dictionary, seed=3)  # dropout 0: the student in training mode is the teacher
    sample = batch_of(dictionary, [random_trees(3, seed=80 + s) for s in range(4)], "paper")
    crit = HexatagLMCriterion(task_for(dictionary), distill_weight=0.7)
    crit.set_teacher(copy.deepcopy(student))
    _, log = run(crit, student, sample)
    ntokens = int((sample["target"] != 1).sum())
    assert abs(float(log["distill_kl"])) <= 1e-5 * ntokens  # float32 sums of a KL that is 0
    student.eval()
    with torch.no_grad():
        valid, _, vlog = crit(student, sample)
        plain, _, _ = HexatagLMCriterion(task_for(dictionary))(student, sample)
    assert float(valid) == float(plain) and "distill_kl" not in vlog
    assert list(crit.parameters()) == [] and crit.state_dict() == {}  # not trained, saved or wrapped by fairseq
    assert all(not p.requires_grad for p in crit._teacher[0].parameters())


def test_bad_weight_and_mlm_are_refused(dictionary):
    from sipe_fairseq.criterions.hexatag_mlm import HexatagMLMCriterion

    task = task_for(dictionary)
    with pytest.raises(OptionError, match="--distill-weight must be in") as err:
        HexatagLMCriterion(task, distill_teacher="x.pt", distill_weight=1.5)
    assert "\n" not in str(err.value)
    with pytest.raises(OptionError, match="does not distill"):
        HexatagMLMCriterion(task, distill_teacher="x.pt")


def _train(data, args, save):
    cmd = [str(c) for c in [BIN / "fairseq-train", data, *args, "--save-dir", save]]
    return launcher.run(cmd, env=ENV, timeout=600)


def test_fairseq_train_distills_and_refuses_a_mismatched_teacher(train_checkpoint, toy_data, tmp_path):
    from conftest import TRAIN_COMMON

    word = ["--tag-head-placement", "last_subword", "--sipe-tag-head-input", "word"]
    teacher = train_checkpoint(txl("position", *word))
    student = [*TRAIN_COMMON, *txl("position", *word, "--tag-sampling", "1.0", "--sipe-tag-head-detach",
                                   "--distill-teacher", str(teacher), "--distill-weight", "0.5", "--log-interval", "1")]
    proc = _train(toy_data, student, tmp_path / "student")
    assert proc.returncode == 0, proc.stderr[-3000:]
    kls = [float(m.group(1)) for m in re.finditer(r"distill_kl[= ]([0-9.]+)", proc.stdout + proc.stderr)]
    assert len(kls) >= 6 and all(k > 0 for k in kls)  # one per update and the epoch summary; none in validation
    assert "valid" not in " ".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if "distill_kl" in ln)
    state = torch.load(tmp_path / "student" / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    assert not any(k.startswith("_teacher") or "teacher" in k for k in state["model"])
    # a teacher trained with another tag timing would read the tags in the wrong layout: one line, exit 1
    timed = [*TRAIN_COMMON, *txl("position", *word, "--tag-timing", "nt-delay", "--distill-teacher", str(teacher))]
    proc = _train(toy_data, timed, tmp_path / "timed")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "--distill-teacher" in ln]
    assert len(lines) == 1 and "--tag-timing paper" in lines[0] and "nt-delay" in lines[0], proc.stderr[-2000:]
    # a teacher without an injection reads no tags: any student timing may distill from it (born-again control)
    plain = train_checkpoint(txl("none"))
    proc = _train(toy_data, [*TRAIN_COMMON, *txl("position", *word, "--tag-timing", "nt-delay", "--distill-teacher",
                                                  str(plain), "--log-interval", "1")], tmp_path / "plain")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"distill_kl[= ]([0-9.]+)", proc.stdout + proc.stderr)
    proc = _train(toy_data, [*TRAIN_COMMON, *txl("position", "--distill-teacher", str(tmp_path / "none.pt"))],
                  tmp_path / "missing")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr[-3000:]  # a missing checkpoint: 3
    assert sum("none.pt" in ln for ln in proc.stderr.splitlines()) == 1, proc.stderr[-2000:]

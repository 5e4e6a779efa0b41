"""Optimizer ``grouped_adam``: fairseq's Adam (decoupled weight decay, i.e. AdamW) with one torch
parameter group per model parameter group and a learning-rate multiplier per group
(``--lr-scales gilt=5,arc=5``), for GiLT-GPT2's post-training: the pre-trained weights at the base
rate, the new key projections (stage 1) and the arc scorer (stage 2) at a higher one (docs/gilt-reference.md
section 6).

A parameter's group is fairseq's ``param_group`` attribute (the convention of fairseq's
``composite`` optimizer), set by the model (``gilt_transformer_lm``: ``gilt``, ``arc``); parameters
without it are in ``default`` (multiplier 1). fairseq's ``composite`` optimizer reads the same
attribute but needs a hydra dictionary of per-group optimizers and schedulers, and fairseq's
``set_lr`` gives every torch group one rate; here the scheduler's rate (any ``--lr-scheduler``) is
multiplied per group at every ``set_lr``, so warm-up and decay keep the groups' ratio, and
``get_lr`` reports the base rate (what fairseq logs as ``lr``).

Mixed precision: ``--fp16``/``--bf16`` flatten the parameters into one tensor unless
``--fp16-no-flatten-grads`` is given (fairseq then copies ``param_group`` to the fp32 copies).
"""
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict

from fairseq.optim import register_optimizer
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

logger = logging.getLogger(__name__)

DEFAULT_GROUP = "default"


def parse_scales(text: str) -> Dict[str, float]:
    """``"gilt=5,arc=2.5"`` -> {"gilt": 5.0, "arc": 2.5}; a clear error for anything else."""
    out = {}
    for item in filter(None, (s.strip() for s in str(text or "").split(","))):
        name, sep, value = item.partition("=")
        try:
            scale = float(value)
        except ValueError:
            scale = -1.0
        if not sep or not name.strip() or scale < 0:
            raise ValueError(f"--lr-scales: {item!r} is not GROUP=MULTIPLIER (a non-negative number), e.g. gilt=5,arc=5")
        out[name.strip()] = scale
    return out


@dataclass
class GroupedAdamConfig(FairseqAdamConfig):
    lr_scales: str = field(default="", metadata={
        "help": "GROUP=X,...: the parameters of model parameter group GROUP (attribute param_group; "
                "gilt_transformer_lm: 'gilt' = graph tables and key projections, 'arc' = arc scorer) train at X "
                "times the scheduled --lr; other parameters at --lr"})


@register_optimizer("grouped_adam", dataclass=GroupedAdamConfig)
class GroupedAdam(FairseqAdam):
    def __init__(self, cfg: GroupedAdamConfig, params):
        scales = parse_scales(cfg.lr_scales)
        groups: "OrderedDict[str, list]" = OrderedDict([(DEFAULT_GROUP, [])])
        for p in params:
            groups.setdefault(getattr(p, "param_group", DEFAULT_GROUP), []).append(p)
        unknown = sorted(set(scales) - set(groups))
        if unknown:
            raise ValueError(f"--lr-scales names {', '.join(unknown)}, but the model's parameter groups are "
                             f"{', '.join(groups)}")
        self._scales, self._base_lr = scales, float(cfg.lr[0])
        torch_groups = [{"params": ps, "group_name": name, "lr_scale": scales.get(name, 1.0)}
                        for name, ps in groups.items() if ps]
        super().__init__(cfg, torch_groups)
        self.set_lr(self._base_lr)
        logger.info("grouped_adam: " + "; ".join(
            f"{g['group_name']}: {sum(p.numel() for p in g['params']):,} parameters at {g['lr_scale']:g} x lr"
            for g in self.param_groups))

    def get_lr(self):
        """The scheduled base rate (the ``default`` group's)."""
        return self._base_lr

    def set_lr(self, lr):
        self._base_lr = float(lr)
        for group in self.param_groups:
            group["lr"] = lr * group["lr_scale"]

    def load_state_dict(self, state_dict, optimizer_overrides=None):
        """Resume the moments; the multipliers are this run's ``--lr-scales`` (torch would restore the saved ones)."""
        super().load_state_dict(state_dict, optimizer_overrides)
        for group in self.param_groups:
            group["lr_scale"] = self._scales.get(group["group_name"], 1.0)
        self.set_lr(self._base_lr)

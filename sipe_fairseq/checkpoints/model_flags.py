"""The fairseq-train flags that rebuild a checkpoint's model body (``sipe-eval glue --model-flags``): what a
GLUE fine-tuning of a pre-trained checkpoint passes so that ``--finetune-from-model`` or
``--restore-file`` loads it strictly."""
import argparse
from typing import List

from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY
from omegaconf import OmegaConf

from .load import read_checkpoint

# head settings are left to the fine-tuning command; the rest are task settings or interpolations
_NOT_MODEL_FLAGS = {"_name", "tokens_per_sample", "max_target_positions", "pooler_dropout", "pooler_activation_fn",
                    "tie_adaptive_weights", "load_checkpoint_heads", "spectral_norm_classification_head"}


def _legacy_model_options(arch: str):
    """``{dest: (flag, default, is_switch)}`` of an argparse-configured fairseq model (e.g. ``roberta``)."""
    cls = ARCH_MODEL_REGISTRY.get(arch)
    if cls is None or not hasattr(cls, "add_args"):
        return None
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_args(parser)
    return {a.dest: (a.option_strings[0], a.default, a.nargs == 0) for a in parser._actions if a.option_strings}


def model_flags(path: str) -> List[str]:
    """fairseq-train flags that rebuild the model body of a (pre-trained) checkpoint: ``--arch`` and
    every field of the model's config with its saved value (booleans only when they differ from the
    default, as fairseq's store_true/store_false flags require), so ``--finetune-from-model`` or
    ``--restore-file`` loads it strictly. Encoders get ``--max-positions``, their pre-training length
    (``sipe_roberta``'s learned positions are sized by it, as RoBERTa's). fairseq's argparse models
    (``roberta``) are read through their ``add_args``. Classification-head settings are left to the
    fine-tuning command."""
    state = read_checkpoint(path)  # registers the sipe models; allows the Namespace of legacy checkpoints
    cfg = state["cfg"]
    model = OmegaConf.to_container(cfg, resolve=True)["model"] if OmegaConf.is_config(cfg["model"]) else vars(cfg["model"])
    arch = model.get("_name") or model.get("arch")
    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(arch, arch))
    if dc is not None:
        defaults = dc()
        options = {name: ("--" + name.replace("_", "-"), getattr(defaults, name), isinstance(model.get(name), bool))
                   for name in dc.__dataclass_fields__}
    else:
        options = _legacy_model_options(arch)
        if options is None:
            raise ValueError(f"{path}: architecture {arch!r} is neither a dataclass nor an argparse fairseq model")
    flags = ["--arch", arch]
    for name, (flag, default, switch) in options.items():
        if name in _NOT_MODEL_FLAGS or name not in model or model[name] is None:
            continue
        value = model[name]
        if switch:
            if bool(value) != bool(default):
                flags.append(flag)
        elif dc is not None or value != default:  # an argparse default needs no flag
            flags += [flag, str(value)]
    return flags

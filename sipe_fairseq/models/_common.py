"""Helpers shared by the model assemblies (not a registered module)."""
import logging

logger = logging.getLogger(__name__)

SIPE_PREFIXES = ("tags.", "fusion.", "deprel.")


def log_parameters(name: str, body) -> None:
    """Log the parameter count of ``body`` and how many belong to SiPE (tag tables, input fusion,
    deprel table, injection projections)."""
    n = sum(p.numel() for p in body.parameters())
    sipe = sum(p.numel() for k, p in body.named_parameters() if k.startswith(SIPE_PREFIXES) or "injections" in k)
    logger.info(f"{name}: {n:,} parameters ({sipe:,} SiPE: tag tables, fusion and projections)")
